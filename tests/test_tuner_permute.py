"""Tuning a permute's transpose pass (`tune --axes`, `tune_gpu(axes=...)`) without a GPU: what
gets tuned (the pass, its class and its strides), the strided studies with the synthetic
objective and a real SQLite database, and that lookup then serves the result to the pass's
class. The measuring side's strided reference compiles with nvcc where nvcc exists."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import optuna
import pytest
from _synthetic import DEVICE, SyntheticObjective

from autotranspose.dispatch import lookup
from autotranspose.errors import AxesError, LayoutError, TuningError
from autotranspose.kernels.codegen import render_support
from autotranspose.kernels.shapes import (
    Layout,
    ShapeClass,
    call_vec,
    check_layout,
    pass_vec,
    shape_class,
)
from autotranspose.plans.boxes import Dim
from autotranspose.plans.permute import TRANSPOSE, Pass, plan_permute
from autotranspose.store import Store
from autotranspose.tuner.study import PermuteTarget, permute_target, study_name, tune, tune_gpu
from autotranspose.tuner.worker import GpuObjective

pytest_plugins = ("store_fixtures",)

# (batch, m, n) of a strided pass: (512, 64, 1024) float32 by (2, 1, 0), one launch
STRIDED = (64, 512, 1024)
STRIDED_LAYOUT = Layout(65536, 32768, 1024, 512)
STRIDED_CLASS = ShapeClass(64, 512, 1024, 4)


pytestmark = pytest.mark.usefixtures("quiet_optuna")


def _tune(store: Store, objective: SyntheticObjective, shape=STRIDED, **kw):
    kw.setdefault("trials", 8)
    return tune(
        kw.pop("dtype", "float32"),
        shape,
        objective=objective,
        store=store,
        device=DEVICE,
        seed=1,
        **kw,
    )


# --- what gets tuned ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dtype", "shape", "axes", "tuned", "layout", "cls"),
    [
        # NCHW <-> NHWC: batched transposes of contiguous matrices (the class's own study)
        ("float16", (64, 256, 56, 56), (0, 2, 3, 1), (64, 256, 3136), None, "64x256x4096/v8"),
        ("float16", (64, 56, 56, 256), (0, 3, 1, 2), (64, 3136, 256), None, "64x4096x256/v8"),
        # the head swap that moves the head dim innermost: a transpose too
        ("float16", (8, 4096, 32, 128), (0, 2, 3, 1), (8, 4096, 4096), None, "8x4096x4096/v8"),
        # a reversed 3-D array: the batch interleaves with both sides' rows
        ("float32", (512, 64, 1024), (2, 1, 0), STRIDED, STRIDED_LAYOUT, str(STRIDED_CLASS)),
        # a strided pass with a host loop: one launch is measured, on its strides
        (
            "float32",
            (4, 2, 2048, 1024),
            (1, 3, 0, 2),
            (4, 2048, 1024),
            Layout(1024, 8192, 4194304, 2048),
            "4x2048x1024/v4",
        ),
        # the innermost axis stays: pairs of float16 move as 4-byte words
        ("float16", (4096, 2048, 2), (1, 0, 2), (1, 4096, 2048), None, "1x4096x2048/v4"),
    ],
)
def test_a_transpose_pass_is_tuned_on_its_class_and_strides(
    dtype, shape, axes, tuned, layout, cls
) -> None:
    target = permute_target(dtype, shape, axes)
    (p,) = target.plan.passes
    assert p.kind == TRANSPOSE and target.untuned == ""
    assert (target.shape, target.layout, str(target.shape_class)) == (tuned, layout, cls)
    # the dtype tuned is one of the pass's element size (the kernels are keyed by size)
    assert np.dtype(target.dtype).itemsize == p.elem_bytes
    assert target.dtype == dtype or p.elem_bytes != np.dtype(dtype).itemsize
    # the class is the one transpose() keys the pass's launch by (strides and pointers)
    strides = (p.ld_in, p.ld_out, p.bs_in, p.bs_out)
    assert target.shape_class.vec == call_vec(p.elem_bytes, *tuned, *strides, pointers=(0, 0))


@pytest.mark.parametrize(
    ("dtype", "shape", "axes", "kind"),
    [
        ("float16", (8, 4096, 32, 128), (0, 2, 1, 3), "copy"),  # the head swap of (B, S, H, D)
        ("bfloat16", (8, 4096, 32, 128), (0, -2, 1, 3), "copy"),
        ("float32", (3, 5), (0, 1), "copy"),  # the identity: one contiguous block
        ("float32", (2, 7, 3, 5, 11), (0, 2, 1, 4, 3), "packed"),  # six small launches
        ("float32", (100000, 3, 5), (0, 2, 1), "packed"),  # tiles too small for a tile kernel
        ("float32", (2,) * 8, (7, 6, 5, 4, 3, 2, 1, 0), "gather"),  # a box would span all 8 dims
    ],
)
def test_copy_packed_and_gather_passes_have_nothing_to_tune(dtype, shape, axes, kind) -> None:
    target = permute_target(dtype, shape, axes)
    assert target.shape is target.layout is target.shape_class is None
    assert target.plan.passes[0].kind == kind
    assert target.untuned == f"nothing to tune: {kind} pass"
    assert target.describe() == target.plan.passes[0].describe()


def test_a_batched_transpose_alternative_is_tuned() -> None:
    """float32 (200, 64, 112, 8) by (3, 1, 0, 2) is one packed launch, and its first call also
    times the batched transpose (64 launches) it replaced: tune that one, so it competes
    tuned."""
    target = permute_target("float32", (200, 64, 112, 8), (3, 1, 0, 2))
    (own,) = target.plan.passes
    (alt,) = [q for q in target.plan.alternatives if q.kind == TRANSPOSE]
    assert own.kind == "packed" and target.untuned == "" and target.tuned == alt
    assert target.shape == (alt.batch, alt.m, alt.n) and target.dtype == "float32"
    assert target.layout == check_layout(
        target.shape, (alt.ld_in, alt.ld_out, alt.bs_in, alt.bs_out)
    )
    assert target.shape_class == shape_class(*target.shape, pass_vec(alt))
    assert target.describe() == f"{own.describe()}; tuned: its alternative {alt.describe()}"


def test_an_empty_permute_has_nothing_to_move() -> None:
    target = permute_target("float32", (4, 0, 3), (2, 1, 0))
    assert target == PermuteTarget(target.plan, "float32")
    assert target.untuned == "nothing to tune: nothing to move"


@pytest.mark.parametrize(
    ("shape", "axes", "error", "says"),
    [
        ((4, 5, 6), (0, 1), AxesError, "name 2 axes but the array has 3"),
        ((4, 5, 6), (0, 1, 1), AxesError, "repeat axis 1"),
        ((4, 5, 6), (0, 1, 3), AxesError, "out of range"),
    ],
)
def test_bad_axes_are_refused_with_the_fix(shape, axes, error, says) -> None:
    with pytest.raises(error, match=says):
        permute_target("float32", shape, axes)


def test_host_loop_offsets_cap_the_vector_as_permute_launches_them() -> None:
    """A launch of a later host-loop index starts at its byte offset from the allocation:
    an offset aligned to 8 bytes allows float32 vectors of 2, whatever the strides allow."""
    loops = (Dim(2, 16386, 16386),)
    p = Pass(TRANSPOSE, 4, 64, 64, 64, 64, 4, 4096, 4096, loops)
    assert call_vec(4, 4, 64, 64, 64, 64, 4096, 4096) == 4
    assert pass_vec(p) == 2
    # what dispatch.permute.build_steps asks for: the least aligned launch's pointers
    from autotranspose.dispatch.permute import weakest

    i, o = weakest(tuple(p.offsets()), 256, 512)
    assert call_vec(4, 4, 64, 64, 64, 64, 4096, 4096, pointers=(256 + i, 512 + o)) == 2


# --- layouts ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shape", "axes"),
    [
        ((40, 12, 9), (2, 1, 0)),
        ((32, 8, 64), (2, 1, 0)),
        ((6, 10), (1, 0)),
        ((3, 40, 5, 24), (2, 3, 0, 1)),
        ((9, 16, 40), (1, 2, 0)),
    ],
)
def test_a_layouts_spans_hold_exactly_the_elements_one_launch_moves(shape, axes) -> None:
    """What the measuring buffers must hold: every element one launch of the pass reads and
    writes lies within the spans, the last ones at their ends, each written once."""
    (p,) = plan_permute(shape, axes, 4).passes
    assert p.kind == TRANSPOSE
    dims = (p.batch, p.m, p.n)
    layout = Layout(p.ld_in, p.ld_out, p.bs_in, p.bs_out)
    b, i, j = np.ix_(range(p.batch), range(p.m), range(p.n))
    reads = b * p.bs_in + i * p.ld_in + j
    writes = b * p.bs_out + j * p.ld_out + i
    assert (int(reads.max()) + 1, int(writes.max()) + 1) == layout.spans(dims)
    assert len(np.unique(writes)) == writes.size and len(np.unique(reads)) == reads.size
    assert check_layout(dims, layout) in (None, layout)


def test_the_contiguous_layout_is_none() -> None:
    assert check_layout((4, 64, 32), (32, 64, 2048, 2048)) is None
    assert check_layout((4, 64, 32), None) is None
    # a batch of one: its batch strides are never used
    assert check_layout((1, 64, 32), [32, 64, 0, 7]) is None
    assert check_layout((1, 64, 32), (40, 64, 0, 0)) == Layout(40, 64, 2560, 2048)


@pytest.mark.parametrize(
    ("layout", "says"),
    [
        ((32, 64, 2048), "must be 4 ints"),
        ((32.0, 64, 2048, 2048), "must be 4 ints"),
        ("32,64,2048,2048", "must be 4 ints"),
        ((True, 64, 2048, 2048), "must be 4 ints"),
        ((16, 64, 2048, 2048), r"ld_in >= n = 32"),
        ((32, 63, 2048, 2048), r"ld_out >= m = 64"),
        ((32, 64, 1024, 2048), "batches of the input overlap"),
        ((32, 64, 2048, 0), "batches of the output overlap"),
        ((32, 64, 2**62, 2048), "past 2\\*\\*63-1"),
    ],
)
def test_bad_layouts_are_refused_with_the_fix(layout, says) -> None:
    with pytest.raises(LayoutError, match=says):
        check_layout((4, 64, 32), layout)


def test_the_gpu_objective_refuses_a_bad_layout_before_starting_a_process() -> None:
    with pytest.raises(LayoutError, match="batches of the output overlap"):
        GpuObjective("float32", (4, 64, 32), layout=(32, 64, 2048, 1))


# --- strided studies ----------------------------------------------------------------------------
def test_a_strided_pass_is_stored_under_its_class_and_served(db: Store) -> None:
    objective = SyntheticObjective()
    result = _tune(db, objective, layout=STRIDED_LAYOUT)
    assert result.layout == STRIDED_LAYOUT and result.shape_class == STRIDED_CLASS
    assert f":{STRIDED_CLASS}:layout=65536,32768,1024,512:" in result.study_name
    (entry,) = db.entries(DEVICE.name)
    assert (entry.shape_class, entry.config, entry.shape) == (STRIDED_CLASS, result.config, STRIDED)
    # the measurements are the layout's: the contiguous (batch, m, n) has none
    assert db.measured(DEVICE.name, 4, STRIDED, result.config, STRIDED_LAYOUT) == result.measurement
    assert db.measured(DEVICE.name, 4, STRIDED, result.config) is None
    lookup.clear_cache()
    choice = lookup.choose(DEVICE, 4, STRIDED_CLASS, store=db)
    assert (choice.source, choice.config) == ("tuned", result.config)


def test_a_strided_study_resumes_from_its_own_measurements_only(db: Store) -> None:
    """Running again resumes the strided study without measuring; the contiguous shape of
    the same (batch, m, n) is another study and measures everything itself."""
    first = _tune(db, SyntheticObjective(), layout=STRIDED_LAYOUT)
    again = SyntheticObjective()
    second = _tune(db, again, layout=list(STRIDED_LAYOUT))  # any sequence of 4 ints
    assert again.calls == [] and second.trials == 0 and second.study_name == first.study_name
    contiguous = SyntheticObjective()
    plain = _tune(db, contiguous)
    assert plain.study_name != first.study_name and ":layout=" not in plain.study_name
    assert plain.layout is None and len(contiguous.calls) == plain.measured == 8
    # both compete for the one best of the class
    (entry,) = db.entries(DEVICE.name)
    best = max((first, plain), key=lambda r: r.measurement.gbps)
    assert entry.gbps == best.measurement.gbps


def test_a_contiguous_layout_given_is_the_plain_study(db: Store) -> None:
    plain = _tune(db, SyntheticObjective(), trials=4)
    again = SyntheticObjective()
    same = _tune(db, again, trials=4, layout=Layout.contiguous(STRIDED))
    assert same.study_name == plain.study_name and same.layout is None and again.calls == []


def test_flat_configs_whose_rows_a_layout_breaks_are_not_tried(db: Store) -> None:
    """A skinny class starts from the flat default; with input rows pitched wider than the
    short side no flat kernel can run the pass (`_dispatch.transpose.flat_fits_call`), so none is measured."""
    shape = (64, 512, 32)
    contiguous, strided = SyntheticObjective(), SyntheticObjective()
    _tune(db, contiguous, shape, trials=6)
    _tune(db, strided, shape, trials=6, layout=(64, 512, 32768, 16384))
    assert any(c.spans_short_side for c in contiguous.calls)
    assert strided.calls and not any(c.spans_short_side for c in strided.calls)


def test_max_vector_caps_the_class(db: Store) -> None:
    result = _tune(db, SyntheticObjective(), (1, 2048, 2048), trials=3, max_vector=2)
    assert result.shape_class == ShapeClass(1, 2048, 2048, 2) and result.config.vec <= 2
    with pytest.raises(TuningError, match="max_vector must be 1, 2, 4, 8 or 16"):
        _tune(db, SyntheticObjective(), (1, 2048, 2048), max_vector=3)


def test_a_bad_layout_is_refused_before_any_study(db: Store) -> None:
    objective = SyntheticObjective()
    with pytest.raises(LayoutError, match="rows overlap"):
        _tune(db, objective, layout=(1, 1, 1, 1))
    assert objective.calls == [] and optuna.get_all_study_names(db.url) == []


def test_study_names_say_a_strided_layout() -> None:
    from autotranspose.kernels.config import config_space
    from autotranspose.tuner.study import SearchSpace

    space = SearchSpace(config_space("float32", max_vector=4))
    plain = study_name(DEVICE, 4, STRIDED_CLASS, space)
    strided = study_name(DEVICE, 4, STRIDED_CLASS, space, layout=STRIDED_LAYOUT)
    assert strided == plain.replace(
        f":{STRIDED_CLASS}:", f":{STRIDED_CLASS}:layout=65536,32768,1024,512:"
    )


def test_tune_gpu_refuses_a_conjugate_permute_and_skips_copies(tmp_path: Path) -> None:
    """Before any process starts: a copy pass has nothing to tune (None), and a permute has
    no conjugate."""
    url = f"sqlite:///{tmp_path / 'none.db'}"
    assert tune_gpu("float16", (8, 4096, 32, 128), axes=(0, 2, 1, 3), db=url) is None
    with pytest.raises(TuningError, match="a permute \\(axes\\) has none"):
        tune_gpu("complex64", (64, 32, 16), axes=(2, 1, 0), conjugate=True, db=url)
    with pytest.raises(AxesError, match="repeat axis"):
        tune_gpu("float32", (64, 32, 16), axes=(2, 2, 0), db=url)
    assert not (tmp_path / "none.db").exists()


# --- the strided reference ----------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_the_strided_reference_compiles(tmp_path: Path) -> None:
    src = tmp_path / "support.cu"
    src.write_text(render_support())
    run = subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_80", str(src), "-o", str(tmp_path / "support.cubin")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    cubin = (tmp_path / "support.cubin").read_bytes()
    for s in (1, 2, 4, 8, 16):
        assert f"at_naive_strided_s{s}".encode() in cubin


@pytest.mark.parametrize("which", ["outer", "outer2"])
def test_outer_dim_offsets_cap_the_vector_as_the_launch_walks_them(which: str) -> None:
    """A launch that walks outer dims starts matrices at their offsets too: an outer stride
    of 2 float32 elements (8 bytes) allows vectors of 2, like a host loop's."""
    p = Pass(TRANSPOSE, 4, 64, 64, 64, 64, 4, 4096, 4096, **{which: Dim(3, 16386, 16384)})
    assert pass_vec(p) == 2
    assert (
        pass_vec(Pass(TRANSPOSE, 4, 64, 64, 64, 64, 4, 4096, 4096, **{which: Dim(3, 16384, 16384)}))
        == 4
    )
