"""A prepared kernel launch: a config bound to a shape, strides and a loaded kernel.

This sits between the compiler and the public calls: the dispatch builds one per call
signature (a `Launch` for transpose() and permute()'s passes, a `CastLaunch` for
cast_transpose()), and the measuring side (`measure`, `castmeasure`, `bench`) times the very
same objects, so what is tuned is what runs. It knows nothing of lookup, the store or the
tuner: it launches the config it is given.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ShapeError
from ..kernels.codegen import (
    GATHER_BLOCKS_PER_SM,
    GATHER_THREADS,
    GATHER_UNROLL,
    OUTER_ARG_FORMAT,
    PACKED_THREADS,
    ROWS_ARG_FORMAT,
    ROWS_THREADS,
    ROWS_UNROLL,
    RUNS_ARG_FORMAT,
)
from ..kernels.config import KernelConfig
from ..kernels.gather import ARG_FORMAT as GATHER_FORMAT, MAX_STRIDE, gather_args
from ..kernels.inplace import ARG_FORMAT as INPLACE_FORMAT, ARG_NAMES as INPLACE_ARGS, InplaceKernel
from ..kernels.packed import ARG_FORMAT as PACKED_FORMAT, divisor, packed_args
from ..kernels.vbox import THREADS as VBOX_THREADS, vbox_spec
from ..kinds.cast import Format
from ..plans.boxes import NO_DIM, Dim
from ..plans.cast import (
    ARG_WORDS as CAST_ARG_WORDS,
    CastPlan,
    Launch as CastStep,
    coded_args,
    pack_args,
)
from ..plans.permute import REALIGN_MAX_RUN_BYTES, runs_of
from . import driver as _driver, native as _native
from .compiler import (
    ARG_FORMAT,
    DeviceState,
    Kernel,
    get_gather_kernel,
    get_inplace_kernel,
    get_kernel,
    get_packed_kernel,
    get_row_kernel,
    get_runs_kernel,
    get_vbox_kernel,
)

_MAX_GRID_X = 2**31 - 1
_MAX_GRID_Y = 65535
# A row copy's grid (`row_geometry`): long rows are cut into chunks over blockIdx.y until the
# launch has ROWS_WAVES waves of the GPU's resident blocks (ROWS_BLOCKS_PER_SM each), each
# chunk at least ROWS_MIN_STEPS words a thread: 96 rows of 2.1 MB in chunks of 16 steps were
# 792 blocks, under one wave of an H200's 1056, at 84.3% of copy, 91.9% in 172 chunks (bool
# 48x2x2109936 by (1, 0, 2), H200); a launch of enough blocks already is not cut (cut
# in two, float64 944x10x1758 by (1, 0, 2) lost 2 points). A row takes `row_lanes` threads.
ROWS_WAVES, ROWS_BLOCKS_PER_SM, ROWS_MIN_STEPS = 2, 2048 // ROWS_THREADS, 2
# A row copy that ROWS_WAVES cuts at all is cut for ROWS_CUT_WAVES waves instead: the last
# wave's tail is then a smaller share of the launch (H200, the 8 long-row copies measured that
# 2 waves cut: median 93.3 -> 94.0% of copy, none slower; bool 48x2x2109936 by (1,0,2)
# 90.7 -> 92.4, float32 3x64x3x31511 by (1,0,2,3) 95.7 -> 99.3, complex128 4x1x9x2x8066x81
# 87.3 -> 90.1).
# A launch of enough blocks stays uncut: cut for 8 waves, float64 944x10x1758 by (1,0,2) lost
# 94.2 -> 91.9 (dev/rowgrid_check.py, variant waves8).
ROWS_CUT_WAVES = 8
# A row copy whose chunks are ROWS_SKEW_PASSES passes of whole warps or more skews each row's
# words across the lanes so that its stores start on a line of ROWS_STORE_LINE bytes (0: off;
# `row_store_line`). On an H200, rows of 8-byte words at an 8-byte offset wrote 8% more L2
# sectors than their bytes in 1.4x the requests, at 3.4 TB/s against 4.1 for aligned 16-byte
# rows; skewed, float64 10x144x15x5695 by (0,2,1,3) went 78.7 -> 85.7% of copy, complex64
# 173x15x17787 by (1,0,2) 81.2 -> 87.1. Rows of 1-2 passes lost 2-6 points to the skew's
# arithmetic, and keep the unskewed kernel.
ROWS_STORE_LINE, ROWS_SKEW_PASSES = 128, 4


@dataclass(frozen=True)
class RowGeometry:
    """How a row copy's threads cover its rows: `lanes` threads a row (`per_block` rows side
    by side in a block, ROWS_UNROLL rows a thread), rows cut into `chunks` chunks of `chunk`
    words (blockIdx.y), and `blocks` blocks along blockIdx.x."""

    lanes: int
    per_block: int
    chunk: int
    chunks: int
    blocks: int


def row_lanes(n: int) -> int:
    """Threads per row of `n` words: a row under a warp, its words (a warp then spans rows:
    19-word rows are 13 rows of 19 busy lanes a block, not 8 of 32); a longer row the power
    of two over it, up to the block, in one pass (H200: whole warps in several passes lost
    5-10 points to idle lanes in one pass, e.g. complex64 rows of 155 words 89.6 -> 80.1)."""
    return n if n <= 32 else min(ROWS_THREADS, 1 << (n - 1).bit_length())


def row_geometry(rows: int, n: int, multiprocessors: int, walked: int = 1) -> RowGeometry:
    """The grid of a copy of `rows` rows of `n` words, `walked` times over blockIdx.z, on a
    GPU of `multiprocessors` SMs (pure: tests/test_permute.py walks the kernel's threads
    over it)."""
    lanes = row_lanes(n)
    per_block = ROWS_THREADS // lanes
    blocks = max(1, -(-rows // (per_block * ROWS_UNROLL)))
    chunk, chunks = _row_chunks(n, lanes, blocks, multiprocessors, walked)
    if chunks > 1:
        chunk, chunks = _row_chunks(n, lanes, blocks, multiprocessors, walked, ROWS_CUT_WAVES)
    return RowGeometry(lanes, per_block, chunk, chunks, blocks)


def _row_chunks(
    n: int, lanes: int, blocks: int, multiprocessors: int, walked: int, waves: int = 0
) -> tuple[int, int]:
    """(chunk, chunks): rows of `n` words over `lanes` threads cut along blockIdx.y, for a
    launch of `blocks` x `walked` blocks otherwise (the row copy's and the realigned copy's
    rule): no cut for rows no longer than a block, else enough chunks for `waves` waves
    (ROWS_WAVES where 0), each at least ROWS_MIN_STEPS words a lane and a whole number of
    passes."""
    waves = waves or ROWS_WAVES
    want = (
        1
        if n <= ROWS_THREADS
        else -(-waves * multiprocessors * ROWS_BLOCKS_PER_SM // (blocks * walked))
    )
    chunk = max(lanes * ROWS_MIN_STEPS, -(-n // want), -(-n // _MAX_GRID_Y))
    chunk = -(-chunk // lanes) * lanes
    return chunk, max(1, -(-n // chunk))


def row_store_line(n: int, chunk: int, lanes: int) -> int:
    """The line (bytes) a row copy's stores are skewed to start on, 0 for none: chunks of
    ROWS_SKEW_PASSES passes of whole warps or more (a row under a warp shares its warp with
    other rows, which no skew lines up; on short rows the skew costs more than it gains)."""
    if lanes < 32 or min(n, chunk) < ROWS_SKEW_PASSES * lanes:
        return 0
    return ROWS_STORE_LINE


_POINTERS = struct.Struct("PP")
_SAME = _driver._SAME


@dataclass(frozen=True)
class Launch:
    """A prepared launch: everything but the two pointers, the stream and the context.

    The scalar arguments are packed once; a call packs two pointers and hands the argument
    block to the driver."""

    config: KernelConfig | None  # None: permute's row copy, gather or packed pass, not a config
    kernel: Kernel
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    scalars: tuple[
        int, ...
    ]  # packed by `arg_format` (the transpose kernels': M, N, strides, tiles)
    state: DeviceState
    # how `scalars` are laid out after the two pointers: the transpose kernels' arguments,
    # the row copies' struct (`codegen.ROWS_ARG_FORMAT`), a gather's (`gather.ARG_FORMAT`) or a
    # packed launch's (`packed.ARG_FORMAT`)
    arg_format: str = ARG_FORMAT[2:]
    tail: bytes = b""
    args: tuple[Any, ...] = ()  # cuLaunchKernel's kernel, grid, block and shared bytes, as C
    # the launch made ready for a given context (one dict entry per context)
    in_context: dict[int, _driver.Prepared] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tail", struct.pack(self.arg_format, *self.scalars))
        if self.shared:
            _driver.allow_dynamic_shared(self.kernel.handle, self.shared, self.state.ordinal)
        object.__setattr__(
            self,
            "args",
            _driver.launch_args(self.kernel.handle, self.grid, self.block, self.shared),
        )

    @property
    def shared(self) -> int:
        """Dynamic shared memory bytes of each launch (a config's past the static limit)."""
        return self.config.dynamic_smem if self.config is not None else 0

    def __call__(self, src: int, dst: int, stream: int | None = 0) -> None:
        """Launch in the thread's current context (tools that made it current themselves)."""
        _driver.launch(self.args, stream, _POINTERS.pack(src, dst) + self.tail)

    def run(self, src: int, dst: int, stream: int | None, ctx: int, restore: Any = _SAME) -> None:
        """Launch in `ctx` from any thread; the thread's own context (or `restore`) is made
        current again afterwards."""
        _driver.launch_transpose(self.prepared(ctx), src, dst, stream, restore)

    def prepared(self, ctx: int) -> _driver.Prepared:
        """This launch made ready in context `ctx` (once per context)."""
        prep = self.in_context.get(ctx)
        if prep is None:
            fn = _driver.kernel_function(self.kernel.handle, ctx)
            prep = self.in_context[ctx] = _driver.Prepared(
                fn, ctx, self.grid, self.block, self.tail, self.shared
            )
        return prep


def make_launch(
    state: DeviceState,
    cfg: KernelConfig,
    batch: int,
    m: int,
    n: int,
    ld_in: int,
    ld_out: int,
    bs_in: int,
    bs_out: int,
    outer: Dim = NO_DIM,
    outer2: Dim = NO_DIM,
) -> Launch:
    """A prepared launch of `cfg` for a (batch, m, n) input with the given strides (elements).

    With `outer` or `outer2` (permute's transpose passes: `plan.Pass`), the launch also walks
    those two batch dims, outermost first, through the config's outer variant: the same tiles,
    the batch index split into three dims once per tile (templates/common/outer.cu.j2)."""
    walked = outer.extent * outer2.extent
    tiles_m, tiles_n = cfg.tiles(m, n)
    total = tiles_m * tiles_n * batch * walked
    if total > _MAX_GRID_X:
        raise ShapeError(
            f"a batch of {batch * walked} {m}x{n} matrices needs {total} tiles of "
            f"{cfg.tile_m}x{cfg.tile_n}, more than a launch allows ({_MAX_GRID_X}); use a "
            "config with larger tiles or split the batch"
        )
    grid = cfg.grid(m, n, batch * walked, state.info.multiprocessors)
    v = 1 if cfg.any_offset else cfg.vec  # realigning and staged kernels take strides in elements
    fast, slow = (tiles_n, tiles_m) if cfg.raster == "row" else (tiles_m, tiles_n)
    scalars = (m, n, ld_in // v, ld_out // v, bs_in // v, bs_out // v, fast, slow)
    if walked == 1:
        return Launch(cfg, get_kernel(state, cfg), grid, cfg.block, (*scalars, total), state)
    more = (
        total,
        batch,
        outer.in_stride // v,
        outer.out_stride // v,
        outer2.in_stride // v,
        outer2.out_stride // v,
        outer2.extent,
        0,
    )
    return Launch(
        cfg,
        get_kernel(state, cfg, outer=True),
        grid,
        cfg.block,
        (*scalars, *more),
        state,
        ARG_FORMAT[2:-1] + OUTER_ARG_FORMAT[1:],
    )


def contiguous_launch(state: DeviceState, cfg: KernelConfig, batch: int, m: int, n: int) -> Launch:
    """A prepared launch for row-major contiguous input and output."""
    return make_launch(state, cfg, batch, m, n, n, m, m * n, m * n)


def make_row_copy(
    state: DeviceState,
    elem_bytes: int,
    batch: int,
    m: int,
    n: int,
    ld_in: int,
    ld_out: int,
    bs_in: int,
    bs_out: int,
    outer: int = 1,
    os_in: int = 0,
    os_out: int = 0,
    outer2: int = 1,
    os2_in: int = 0,
    os2_out: int = 0,
) -> Launch:
    """A prepared launch of permute()'s row copy: ``out[z*os_out + b*bs_out + i*ld_out + j] =
    in[z*os_in + b*bs_in + i*ld_in + j]`` for `outer` batches of `batch` x m rows of n
    `elem_bytes`-byte words, and likewise for `outer2` more (os2_in, os2_out apart).

    A generated kernel rather than the driver's 2-D copy (cuMemcpy2DAsync): a 2-D copy moves
    one m-row matrix per call, so the batch would become host calls too, e.g. the
    (8, 4096, 32, 128) float16 head swap would be 256 calls of 1 MB, bound by the host's
    per-call cost rather than by memory; one launch here takes the whole batch. It also runs
    through the same prepared launch and launcher as the transpose kernels (one C call,
    the caller's stream, any context)."""
    if batch >= 2**32:
        raise ShapeError(
            f"a row copy of {batch} batches of {m} rows is more than one launch takes (2**32 "
            "batches); split the array"
        )
    g = row_geometry(batch * m, n, state.info.multiprocessors, max(1, outer * outer2))
    if g.blocks > _MAX_GRID_X or min(outer, outer2) < 1 or outer * outer2 > _MAX_GRID_Y:
        raise ShapeError(
            f"a row copy of {outer} x {outer2} x {batch} x {m} rows of {n} words needs {g.blocks} "
            f"x {outer * outer2} blocks, more than a launch allows ({_MAX_GRID_X} x {_MAX_GRID_Y}); split "
            "the array"
        )
    line = row_store_line(n, g.chunk, g.lanes)
    scalars = (
        m,
        n,
        ld_in,
        ld_out,
        bs_in,
        bs_out,
        os_in,
        os_out,
        os2_in,
        os2_out,
        g.lanes,
        batch,
        g.chunk,
        outer2,
        g.per_block,
        line,
    )
    kernel = get_row_kernel(state, elem_bytes, skew=line > 0)
    return Launch(
        None,
        kernel,
        (g.blocks, g.chunks, outer * outer2),
        (ROWS_THREADS, 1, 1),
        scalars,
        state,
        ROWS_ARG_FORMAT,
    )


@dataclass(frozen=True)
class RunsGeometry:
    """A realigned copy's runs and grid (`runs_geometry`): runs of `run` bytes, each `s0` x
    `s1` rows, `ri` x `rb` of them in a launch; `words` 16-byte output words a run at most
    (its first may be cut), `lanes` threads a run, `per_block` runs a block, runs cut into
    `chunks` chunks of `chunk` words (blockIdx.y), `blocks` blocks along blockIdx.x."""

    run: int
    s0: int
    s1: int
    ri: int
    rb: int
    words: int
    lanes: int
    per_block: int
    chunk: int
    chunks: int
    blocks: int
    walked: int  # blockIdx.z: the two outer dims' indices


def runs_geometry(
    m: int, n: int, ld_out: int, batch: int, bs_out: int, multiprocessors: int, walked: int = 1
) -> RunsGeometry:
    """The runs and grid of a realigned copy of `batch` x `m` rows of `n` bytes (pure:
    tests/test_realign.py walks the kernel's threads over it). Runs take the row copy's
    lanes and chunks rule (`row_lanes`, ROWS_WAVES) over their 16-byte words."""
    run, s0, s1 = runs_of(m, n, ld_out, batch, bs_out)
    # runs: a row each (ri rows of rb matrices), a matrix each, or one
    ri, rb = (m, batch) if s0 == 1 else (batch // s1, 1)
    words = -(-run // 16) + 1
    lanes = row_lanes(words)
    per_block = ROWS_THREADS // lanes
    blocks = max(1, -(-(ri * rb) // per_block))
    chunk, chunks = _row_chunks(words, lanes, blocks, multiprocessors, walked)
    return RunsGeometry(run, s0, s1, ri, rb, words, lanes, per_block, chunk, chunks, blocks, walked)


def _magic(d: int) -> tuple[int, int]:
    """The kernel's (magic, shift) for dividing by `d`; (0, 0) for 1 (no division)."""
    return (0, 0) if d == 1 else divisor(d)


def runs_args(
    batch: int,
    m: int,
    n: int,
    ld_in: int,
    ld_out: int,
    bs_in: int,
    bs_out: int,
    outer: int = 1,
    os_in: int = 0,
    os_out: int = 0,
    outer2: int = 1,
    os2_in: int = 0,
    os2_out: int = 0,
    *,
    multiprocessors: int,
) -> tuple[RunsGeometry, tuple[int, ...]]:
    """The geometry and `at_runs_args` (by RUNS_ARG_FORMAT) of a realigned copy of `outer` x
    `outer2` x `batch` x `m` rows of `n` bytes, strides in bytes (pure: tests/test_realign.py
    runs the kernel's threads on them). Raises ShapeError past what one launch takes."""
    walked = max(1, outer * outer2)
    g = runs_geometry(m, n, ld_out, batch, bs_out, multiprocessors, walked)
    if (
        g.run > REALIGN_MAX_RUN_BYTES
        or g.ri >= 2**32
        or g.rb >= 2**32
        or g.words >= 2**32
        or g.blocks > _MAX_GRID_X
        or min(outer, outer2) < 1
        or walked > _MAX_GRID_Y
    ):
        raise ShapeError(
            f"a realigned copy of {outer} x {outer2} x {batch} x {m} rows of {n} bytes is more "
            f"than one launch takes ({g.blocks} x {g.chunks} x {walked} blocks, runs of {g.run} "
            "bytes); split the array"
        )
    if g.s0 > 1:  # rows side by side in a run: runs are the batch's matrices (or one run)
        in0, in1 = ld_in, (bs_in if g.s1 > 1 else 0)
        rin_i, rout_i, rin_b, rout_b = (0, 0, 0, 0) if g.s1 > 1 else (bs_in, bs_out, 0, 0)
    else:  # a run is a row
        in0 = in1 = 0
        rin_i, rout_i, rin_b, rout_b = ld_in, ld_out, bs_in, bs_out
    nm, ns = _magic(n)
    sm, ss = _magic(g.s0)
    scalars = (
        n,
        in0,
        in1,
        rin_i,
        rout_i,
        rin_b,
        rout_b,
        os_in,
        os_out,
        os2_in,
        os2_out,
        g.run,
        g.s0,
        g.ri,
        g.rb,
        outer2,
        g.lanes,
        g.per_block,
        g.chunk,
        g.words,
        nm,
        ns,
        sm,
        ss,
        0,
    )
    return g, scalars


def make_runs_copy(state: DeviceState, elem_bytes: int, *args: int) -> Launch:
    """A prepared launch of permute()'s realigned row copy (`plan.realigned`): the row copy's
    contract (`make_row_copy`'s arguments) in bytes (`elem_bytes` must be 1), moved in
    aligned 16-byte output words whatever the rows' offsets (templates/rows/,
    `at_copy_runs`)."""
    if elem_bytes != 1:
        raise ShapeError(f"a realigned row copy counts bytes, not {elem_bytes}-byte words")
    g, scalars = runs_args(*args, multiprocessors=state.info.multiprocessors)
    kernel = get_runs_kernel(state)
    return Launch(
        None,
        kernel,
        (g.blocks, g.chunks, g.walked),
        (ROWS_THREADS, 1, 1),
        scalars,
        state,
        RUNS_ARG_FORMAT,
    )


def make_packed(
    state: DeviceState,
    elem_bytes: int,
    dims: tuple[Dim, ...],
    box: tuple[int, ...],
    src: int = 0,
    dst: int = 0,
    pipelined: bool = False,
    realign_out: bool = False,
) -> Launch:
    """A prepared launch of permute()'s packed pass: the gather's contract (every index of
    `dims`), moved in boxes of `box` through shared memory (a plan's PACKED pass), for
    pointers aligned as `src` and `dst` (the words kernel needs both word-aligned), through
    the pipelined kernel if `pipelined` (`plan.Pass.pipelined`), through the spread kernel's
    realigned variant where `realign_out` and it applies (`plan.Pass.realign_out`).

    The grid is at most 4 x the kernel's resident blocks per SM (`PackedKernel.blocks_per_sm`):
    those beyond what fits at once wait their turn, and each block walks boxes by the grid
    stride."""
    args = packed_args(
        elem_bytes, dims, box, src, dst, pipelined=pipelined, realign_out=realign_out
    )
    blocks = max(1, min(args.tiles, state.info.multiprocessors * args.kernel.blocks_per_sm * 4))
    kernel = get_packed_kernel(state, args.kernel)
    return Launch(
        None, kernel, (blocks, 1, 1), (PACKED_THREADS, 1, 1), args.values(), state, PACKED_FORMAT
    )


def make_vbox(
    state: DeviceState,
    elem_bytes: int,
    dims: tuple[Dim, ...],
    box: tuple[int, ...],
    vectors: tuple[int, int],
    src: int = 0,
    dst: int = 0,
    scatter: int = 0,
    pad: int = 0,
    blocks: int = 0,
) -> Launch:
    """A prepared launch of a vector box pass (a plan's PACKED pass with `vectors`,
    `_vbox`): every index of `dims` moved in boxes of `box`, for pointers aligned as `src`
    and `dst` (`pad`: the gather's shared box padded, `VBoxKernel.pad`; `blocks`: resident
    an SM, `VBoxKernel.blocks`). The grid is the resident blocks (`blocks_per_sm` an SM),
    each walking boxes by the grid stride, so a block copies its table once for many
    boxes."""
    spec, values = vbox_spec(elem_bytes, dims, box, vectors, src, dst, scatter, pad, blocks)
    tiles = values[-2]
    grid = max(1, min(tiles, state.info.multiprocessors * spec.blocks_per_sm))
    kernel = get_vbox_kernel(state, spec)
    return Launch(None, kernel, (grid, 1, 1), (VBOX_THREADS, 1, 1), values, state, PACKED_FORMAT)


def make_gather(state: DeviceState, elem_bytes: int, dims: tuple[Dim, ...]) -> Launch:
    """A prepared launch of permute()'s gather: ``out[sum k*out_stride] = in[sum k*in_stride]``
    for every index of `dims` (output memory order, outermost first, strides in
    `elem_bytes`-byte elements; a plan's GATHER pass), in one launch whatever the shape.

    The grid is GATHER_BLOCKS_PER_SM blocks per SM (what the registers allow resident), or
    fewer for a small problem: each thread then walks many elements by the mixed-radix carry,
    so its one decomposition by division is paid once per many elements."""
    total = math.prod(d.extent for d in dims)
    per_block = GATHER_THREADS * GATHER_UNROLL
    blocks = max(
        1,
        min(
            -(-total // per_block),
            state.info.multiprocessors * GATHER_BLOCKS_PER_SM,
            MAX_STRIDE // GATHER_THREADS,
        ),
    )
    args = gather_args(dims, blocks * GATHER_THREADS)
    kernel = get_gather_kernel(state, elem_bytes)
    return Launch(
        None, kernel, (blocks, 1, 1), (GATHER_THREADS, 1, 1), args.values(), state, GATHER_FORMAT
    )


@dataclass(frozen=True)
class SharedLaunch(Launch):
    """A launch that is no config but sizes its own dynamic shared memory (an in-place
    SHUFFLE's rows, `smem` bytes). Launches of one kernel differ in size, and the opt-in is
    the kernel's: each leaves it at the device's most (`optin`), so that none undercuts
    another's."""

    smem: int = 0
    optin: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.smem:
            _driver.allow_dynamic_shared(self.kernel.handle, self.optin, self.state.ordinal)

    @property
    def shared(self) -> int:
        return self.smem

    def prepared(self, ctx: int) -> _driver.Prepared:
        fresh = ctx not in self.in_context
        prep = super().prepared(ctx)
        if fresh and self.smem:
            _driver.allow_function_dynamic_shared(prep.args[0].value, self.optin, ctx)
        return prep


def make_inplace(
    state: DeviceState,
    spec: InplaceKernel,
    blocks: int,
    args: dict[str, int],
    smem: int = 0,
) -> Launch:
    """A prepared launch of in-place pass `spec` on `blocks` blocks (each walks its items by
    the grid stride), its `at_inplace_args` from `args` (kernels/inplace.py: ARG_NAMES;
    those missing are 0). The two pointers are the matrix and the pass's table or row copy."""
    unknown = set(args) - set(INPLACE_ARGS)
    if unknown:
        raise ShapeError(f"in-place arguments {sorted(unknown)}: not of {INPLACE_ARGS}")
    if not 1 <= blocks <= _MAX_GRID_X:
        raise ShapeError(f"an in-place pass of {blocks} blocks; split the array")
    values = tuple(int(args.get(name, 0)) for name in INPLACE_ARGS)
    kernel = get_inplace_kernel(state, spec)
    return SharedLaunch(
        None,
        kernel,
        (blocks, 1, 1),
        (spec.params.threads, 1, 1),
        values,
        state,
        INPLACE_FORMAT,
        smem=smem,
        optin=max(smem, state.info.limits.max_shared_optin),
    )


# A cast call's operands, in the order its argument blocks' leading words hold them (plans/cast.py
# ARG_FORMAT): x, y, z, the scale's pointer, amax, the scale's value. A relocated program's
# codes for them (`CastLaunch.program`), in that order.
CAST_CODES = tuple(k << _native.RELOC_SHIFT for k in range(1, CAST_ARG_WORDS + 1))


@dataclass(frozen=True)
class CastLaunch:
    """A cast-transpose signature prepared: one cast config's kernel over the plan's launches
    (plans/cast.py). `Launch`'s form for a call of six operands and several launches of one
    kernel: a call packs its operands into each launch's argument block (`run`), or runs them
    all as one relocated `_driver.Program` (`program`: the fast path's form, one C call)."""

    config: KernelConfig
    kernel: Kernel
    plan: CastPlan
    src: Format
    dst: Format
    state: DeviceState
    z_plan: CastPlan | None = None  # two passes: z's own launches where x's buffer is not z
    # the kernel's function in each context (loaded there once, opted in to its shared memory)
    functions: dict[int, int] = field(default_factory=dict, compare=False)

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.config.threads, 1, 1)

    def function(self, ctx: int) -> int:
        """The kernel's function in `ctx` (loaded on first use; opted in to its dynamic
        shared memory where its tile is past the static limit)."""
        fn = self.functions.get(ctx)
        if fn is None:
            fn = _driver.kernel_function(self.kernel.handle, ctx)
            shared = self.config.dynamic_smem
            if shared:
                _driver.allow_function_dynamic_shared(fn, shared, ctx)
            self.functions[ctx] = fn
        return fn

    def for_z(self) -> CastLaunch:
        """The same kernel over z's own launches (`z_plan`), sharing its functions."""
        assert self.z_plan is not None
        return CastLaunch(
            self.config, self.kernel, self.z_plan, self.src, self.dst, self.state,
            functions=self.functions,
        )  # fmt: skip

    def packed(
        self, ctx: int, x: int, y: int, z: int, scale_ptr: int, scale_value: float, amax: int
    ) -> list[tuple[tuple[Any, ...], bytes]]:
        """Each launch's `_driver.launch` arguments and argument block on these operands, in
        order (the tuner packs once per buffer set and times these)."""
        cfg, fn = self.config, self.function(ctx)
        out = []
        for lc in self.plan.launches:
            args, grid = pack_args(
                lc, cfg.tile_m, cfg.tile_n, self.src, self.dst, x, y, z, scale_ptr, amax,
                scale_value,
            )  # fmt: skip
            out.append((_driver.launch_args(fn, (grid, 1, 1), self.block, cfg.dynamic_smem), args))
        return out

    def run(
        self,
        ctx: int,
        stream: int | None,
        x: int,
        y: int,
        z: int,
        scale_ptr: int,
        scale_value: float,
        amax: int,
    ) -> None:
        """Launch the plan's launches on the call's operands in `ctx`, in order (each raises
        amax: a max taken twice is the same max)."""
        launches = self.packed(ctx, x, y, z, scale_ptr, scale_value, amax)
        with _driver.on_context(ctx):
            for args, params in launches:
                _driver.launch(args, stream, params)

    def prepared(
        self, ctx: int, pack: Callable[[CastStep], tuple[bytes, int]]
    ) -> list[_driver.Prepared]:
        """The launches made ready in `ctx`, each with the argument block and grid `pack`
        gives it (`pack_args` on pointers, or `coded_args` on codes)."""
        cfg, fn = self.config, self.function(ctx)
        launches = []
        for lc in self.plan.launches:
            args, grid = pack(lc)
            prep = _driver.Prepared(
                fn, ctx, (grid, 1, 1), self.block, args[16:], cfg.dynamic_smem, args[:16]
            )
            launches.append(prep)
        return launches

    def on_pointers(
        self, ctx: int, pointers: tuple[int, int, int, int, int], scale_value: float
    ) -> list[_driver.Prepared]:
        """The launches made ready in `ctx` with these (x, y, z, scale, amax) words in their
        argument blocks: for callers that replace them at launch (JAX's FFI handler)."""
        cfg = self.config
        return self.prepared(
            ctx,
            lambda lc: pack_args(
                lc, cfg.tile_m, cfg.tile_n, self.src, self.dst, *pointers, scale_value
            ),
        )

    def program(self, ctx: int) -> _driver.Program | None:
        """The launches as one program whose leading argument words are codes for a call's
        operands (`CAST_CODES`), or None without the compiled launcher."""
        cfg = self.config
        launches = self.prepared(
            ctx,
            lambda lc: coded_args(lc, cfg.tile_m, cfg.tile_n, self.src, self.dst, CAST_CODES),
        )
        program = _driver.Program(ctx, [(lc, 0, 0, 8 * CAST_ARG_WORDS) for lc in launches])
        return program if program.address else None
