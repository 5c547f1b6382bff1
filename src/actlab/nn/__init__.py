"""Model building blocks and small reference models."""
