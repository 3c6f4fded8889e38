"""The GPU side: libcuda through ctypes, the compiled launcher, devices, compiling and loading kernels,
launches, array adapters, DLPack and streams."""
