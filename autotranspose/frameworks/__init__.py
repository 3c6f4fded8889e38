"""Framework integrations: PyTorch custom operators and JAX foreign-function calls."""
