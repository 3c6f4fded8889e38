"""Adapters that let array frameworks' own machinery (JAX's tracing, PyTorch's) call the kernels."""
