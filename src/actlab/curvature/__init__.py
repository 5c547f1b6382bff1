"""Curvature operators, eigen-solvers, landscapes and gradient angles."""
