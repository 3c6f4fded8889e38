#!/usr/bin/env bash
# One device call: the GPU tests named (default: the PyTorch integration, the runtime and the
# permute suite), then dev/host_permute.py. Logs under $OUT.
#   source .whl/activate && bash dev/device_check.sh [pytest args...]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -c "import torch, jax, cupy; print('torch', torch.__version__, 'jax', jax.__version__, 'cupy', cupy.__version__)" 2>&1 | tee "$OUT/versions.txt"
tests=("$@")
[ ${#tests[@]} -eq 0 ] && tests=(tests/test_torch_gpu.py tests/test_runtime_gpu.py tests/test_transpose_gpu.py)
timeout 420 python3 -m pytest -m gpu -q -x -p no:cacheprovider "${tests[@]}" 2>&1 | tee "$OUT/pytest.txt" | tail -40
timeout 150 python3 dev/host_permute.py 2>&1 | tee "$OUT/host.txt"
