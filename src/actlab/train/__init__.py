"""Training loops: plain trainer, vmapped ensembles, optimizers and distributed helpers."""
