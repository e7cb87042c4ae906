"""What the controller tells people: a TrainingJob's status, its conditions and Events, why it
waits, and /metrics."""
