"""`autotranspose bench`: ours timed against every peer, in one process, on the same buffers.

For each (shape, dtype) the device-to-device copy of the same bytes is the ceiling; the tuned
autotranspose kernel, cuBLAS geam (through CuPy), CuPy, PyTorch and the seed documents' kernel
are timed on the same rotating buffers with the same CUDA-event method, and reported as GB/s
(bytes read + written) and as a share of the copy; permutes against CuPy, PyTorch, cuTENSOR
and torch.compile. Peers that are not installed are skipped with a note.

- `cases`: the random cases (--random, --random-permute, --small), pure NumPy
- `peers`: each peer as a launch on the bench's buffers, or a note saying why not
- `runners`: checking and timing a case's peers (`bench_case`, `bench_permute_case`),
  and the host cost of small calls
- `reports`: tables, summaries, Markdown, the JSON rows read back, the chart
- `pattern`, `ceiling`: --ceiling, each case's access pattern alone (kernels that move the
  served launches' words with no exchange) and its sectors per byte
- `small`: --small, host-included us per call of small permutes and transposes
- `command`: `run_from_args`, the command itself
"""
