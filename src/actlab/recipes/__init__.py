"""Reusable train-and-measure recipes, one file each (e.g. :mod:`actlab.recipes.diffusion`)."""
