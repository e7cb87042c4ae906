"""A tenant's objects read as caldera's model: the TrainingJob and its pod templates,
quantities, nodes."""
