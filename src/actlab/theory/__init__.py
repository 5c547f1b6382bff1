"""Theory: Gaussian moments, shifts, gains, variance recursion, curvature bounds and gradient angles."""
