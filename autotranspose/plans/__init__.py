"""What a call moves, planned before any kernel: element types, a permute's passes, a cast's launches.
Pure: no CUDA, no config."""
