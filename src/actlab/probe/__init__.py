"""Probes that measure activation statistics inside any model while it trains."""
