"""The one place that picks the kernels a call runs, and keeps them: lookup, first-call measurement,
winners, the caches, the fast path, and the transpose, permute and cast pickers."""
