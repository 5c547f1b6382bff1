"""Data sets available offline and loaders for user-supplied files."""
