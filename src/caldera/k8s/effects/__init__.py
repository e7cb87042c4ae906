"""What the kernel's decisions do to the cluster: the actuator and its flush of writes, the
objects it renders and creates, the guard before any removal."""
