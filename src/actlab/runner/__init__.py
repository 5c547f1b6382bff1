"""Experiment runner: run directories, sweeps, reports and the experiment contract."""
