"""Training: the one loop, its objectives and learning-rate schedules."""
