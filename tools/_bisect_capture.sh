for t in test_flat_kernels_match_the_reference test_every_pointer_offset test_strided_skinny_calls_take_the_tiled_path_and_stay_right test_conjugate_flat test_skinny_past_2_31_elements; do
  r=$(timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu "tests/test_flat.py::$t" tests/test_runtime_gpu.py::test_cupy_stream_capture 2>&1 | tail -1)
  echo "$t :: $r"
done
r=$(timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_transpose_gpu.py tests/test_runtime_gpu.py::test_cupy_stream_capture 2>&1 | tail -1); echo "transpose_gpu :: $r"
r=$(timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_runtime_gpu.py::test_cupy_stream_capture 2>&1 | tail -1); echo "alone :: $r"
