"""Activation library: elementwise functions, shifts, sparsity and gated units, built from spec strings."""
