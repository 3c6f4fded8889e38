"""The kernels: configs (the kinds bound to KernelConfig), shape classes, rendering and versions,
and the untuned kernels' specs (packed, vector boxes, gathers). Pure: no CUDA."""
