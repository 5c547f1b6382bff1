"""One module per experiment; each registers an ``actlab.runner.experiment.Experiment``."""
