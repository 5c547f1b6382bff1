"""Column order of the probe's tidy table."""

COLUMNS = ["step", "layer", "metric", "value"]
