"""What the controller sees each step, returned as facts the runtime applies: TrainingJobs in
(intake), pods (the pod watcher), the controller's own job record."""
