"""Library-level measurements of deep stacks (signal sizes, gradient norms, saturation, dead units)."""
