"""Which kernel a transpose call runs: the one place that picks it.

A call's signature (device, element size, shape, strides, pointer alignment, config forced
or not, conjugation, a permute pass's outer dims) goes in; a prepared `Launch` comes out,
chosen once and kept (`caches.launches`). The choice, in order: a forced config checked
against the call; a copy where each matrix is one contiguous run; the tuned or shipped
config `lookup` serves for the call's class, as `policy.served` runs it; and, where
`policy.raced` calls it a guess, the first call's measurement of `policy.candidates` on the
call's own buffers (`firstcall`), whose winner is kept in the database for other processes
(`winners`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..errors import ConfigError, LayoutError
from ..kernels.config import KernelConfig, regt_side
from ..kernels.shapes import ShapeClass, call_vec, flat_fits, shape_class
from ..plans.boxes import NO_DIM, Dim
from ..plans.dtypes import ElementType, word_type
from ..plans.permute import run_copy
from ..runtime import streams
from ..runtime.arrays import View, matrix_layout
from ..runtime.compiler import DeviceState
from ..runtime.launch import Launch, make_launch, make_row_copy, make_runs_copy
from . import caches, firstcall, lookup, policy, winners


def choose_config(
    state: DeviceState, elem_bytes: int, batch: int, m: int, n: int, vec: int, conjugate: bool
) -> KernelConfig:
    """The config a call uses: tuned, nearest tuned, shipped, else the default."""
    cls = shape_class(batch, m, n, vec)
    choice = lookup.choose(state.info, elem_bytes, cls, conjugate=conjugate)
    return policy.for_call(choice.config, m, n)


def check_forced(
    config: KernelConfig, x: View, vec: int, conjugate: bool, state: DeviceState
) -> KernelConfig:
    """A config the caller forced must fit this call's alignment and this device."""
    if config.vec > vec and not config.any_offset:
        raise ConfigError(
            f"config.vec={config.vec} needs rows, pitches and pointers aligned to "
            f"{config.vec} elements; this call allows vec<={vec}: pass "
            f"config.replace(vec={vec}, ...), config.replace(realign=True), a staged config, or an aligned array"
        )
    if not config.fits(state.info.limits):
        raise ConfigError(
            f"config {config.key} needs {config.threads} threads and {config.smem_bytes} bytes "
            f"of shared memory per block; {state.info.name} allows "
            f"{state.info.limits.max_threads_per_block} and {state.info.limits.max_shared_per_block}"
        )
    return config if config.conjugate == conjugate else config.replace(conjugate=conjugate)


Outer = tuple[Dim, Dim]  # a permute pass's outer batch dims (plan.Pass.outer, .outer2)
NO_OUTER: Outer = (NO_DIM, NO_DIM)


def pick(
    x: View,
    o: View,
    config: Any,
    conjugate: bool,
    state: DeviceState,
    stream: int | None = None,
    ctx: int | None = None,
    outer: Outer = NO_OUTER,
) -> Launch:
    """Choose and build the launch of one signature (the order is the module's docstring)."""
    s = x.et.size
    if (x.ptr | o.ptr) % s:
        raise LayoutError(
            f"the {'input' if x.ptr % s else 'output'} pointer is not aligned to its "
            f"{s}-byte elements; copy the array into a fresh allocation first"
        )
    vec = vec_of(x, o, outer)
    if config is None and not conjugate and outer == NO_OUTER:
        if policy.copies(x.m, x.n, x.ld, o.ld):
            return copy_launch(state, s, x.batch, max(x.m, x.n), x.bs, o.bs, x.ptr, o.ptr)
    if config is None:
        cls = shape_class(x.batch, x.m, x.n, vec)
        choice = lookup.choose(state.info, s, cls, conjugate=conjugate)
        cfg = policy.served(choice, s, x.m, x.n, x.ld, o.ld, vec, conjugate)
        raced = policy.raced(choice, cfg, cls, x.m, x.n)
        if ctx is not None and firstcall.enabled() and raced:
            cfg = _first_call(x, o, cfg, cls, vec, conjugate, state, stream, ctx, outer)
    else:
        cfg = check_forced(config, x, vec, conjugate, state)
        if cfg.spans_short_side and not flat_fits_call(cfg, x, o):
            if cfg.kind == "regt":
                raise ConfigError(
                    f"register transpose {cfg.key} takes exactly {regt_side(cfg)} "
                    f"{'rows' if cfg.params.wide else 'columns'}, contiguous "
                    f"{'output' if cfg.params.wide else 'input'} rows; this call is {x.m}x{x.n} with "
                    f"row pitches {x.ld} (in) and {o.ld} (out): use the config of the call's "
                    "side (config.replace(tile_m=...) or tile_n=...) or another kind"
                )
            raise ConfigError(
                f"flat config {cfg.key} needs a side of at most {cfg.tile_n} elements whose "
                f"rows are contiguous; this call is {x.m}x{x.n} with row pitches {x.ld} (in) "
                f"and {o.ld} (out): use a tiled config (flat=False) or contiguous arrays"
            )
    return make_launch(state, cfg, x.batch, x.m, x.n, x.ld, o.ld, x.bs, o.bs, *outer)


def copy_launch(
    state: DeviceState,
    elem_bytes: int,
    batch: int,
    run: int,
    bs_in: int,
    bs_out: int,
    in_ptr: int,
    out_ptr: int,
) -> Launch:
    """transpose() of matrices that are each one contiguous run in and out (m or n is 1,
    `policy.copies`): the row copy permute() would run for the same bytes
    (`plans.permute.run_copy`), at pointers aligned as these (the call's key keeps their
    alignment)."""
    p = run_copy(batch, run, elem_bytes, bs_in, bs_out, in_ptr, out_ptr)
    return (make_runs_copy if p.realign else make_row_copy)(state, *p.copy_args())


def vec_of(x: View, o: View, outer: Outer = NO_OUTER) -> int:
    """The widest vector (in elements) a call's sizes, strides and pointers allow; with a
    permute pass's `outer` dims, at the pointers of every matrix the launch walks (each
    outer dim moves both by its strides)."""
    s = x.et.size
    walked = [
        p + s * st
        for d in outer
        if d.extent > 1
        for p, st in ((x.ptr, d.in_stride), (o.ptr, d.out_stride))
    ]
    return call_vec(s, x.batch, x.m, x.n, x.ld, o.ld, x.bs, o.bs, (x.ptr, o.ptr, *walked))


def _first_call(
    x: View,
    o: View,
    guess: KernelConfig,
    cls: ShapeClass,
    vec: int,
    conjugate: bool,
    state: DeviceState,
    stream: int | None,
    ctx: int,
    outer: Outer,
) -> KernelConfig:
    """Time a small portfolio on this call's buffers (see `firstcall`); the winner serves every
    later call of the class, and is kept in the database for other processes (`winners`:
    a class another process measured or is measuring is not measured here). Returns the
    config to launch now. A permute pass's `outer` dims are walked by every candidate: the
    portfolio is timed on the whole launch the call makes, not on one batch of it (one
    batch can be a few hundred KB, where the ranking is noise)."""
    s = x.et.size

    def runnable(c: KernelConfig) -> bool:
        return policy.runs(c, state.info.limits, x.m, x.n, vec, x.ld, o.ld)

    near = lookup.neighbours(state.info, s, cls)
    configs = policy.candidates(guess, near, s, x.m, x.n, vec, conjugate, runnable)
    if len(configs) < 2:
        return guess

    def make(c: KernelConfig) -> Launch:
        return make_launch(state, c, x.batch, x.m, x.n, x.ld, o.ld, x.bs, o.bs, *outer)

    def run() -> winners.Winner | None:
        outcome = firstcall.search(state, configs, make, x.ptr, o.ptr, stream, ctx, runnable)
        if outcome is None:
            return None
        firstcall.history.append((state.info.name, s, cls, outcome))
        seconds = outcome.seconds[outcome.best]
        walked = outer[0].extent * outer[1].extent
        gbps = 2 * x.size * walked * s / seconds / 1e9 if seconds else 0.0
        return winners.Winner(outcome.best, gbps, seconds=seconds)

    call = winners.Call(state.info, x.et.name, s, (x.batch, x.m, x.n), cls, conjugate)
    choice = winners.settle(call, run, runnable)
    return guess if choice is None else choice.config


def served(
    state: DeviceState,
    et: ElementType,
    shape: tuple[int, int, int],
    src: int,
    dst: int,
    stream: int | None = 0,
) -> lookup.Choice | None:
    """What transpose() serves a contiguous (batch, m, n) call from `src` into `dst`, and why,
    measuring a class nobody tuned on these buffers as its first call would (the bench).
    None: the call is a copy (one column or one row a matrix)."""
    b, m, n = shape
    x, o = device_views(state, et, 3, shape, (n, m, m * n, m * n), src, dst)
    cfg = pick(x, o, None, False, state, stream, state.ctx).config
    if cfg is None:
        return None
    choice = lookup.choose(state.info, et.size, shape_class(b, m, n, vec_of(x, o)))
    if cfg in (
        choice.config,
        policy.for_call(choice.config, m, n),
    ):  # the result, as the call runs it
        return dataclasses.replace(choice, config=cfg)
    return lookup.Choice(cfg, "default")


def batched_launch(
    state: DeviceState,
    elem_bytes: int,
    shape: tuple[int, int, int],
    strides: tuple[int, int, int, int],
    src: int,
    dst: int,
    stream: int | None,
    ctx: int,
    outer: Outer = NO_OUTER,
) -> Launch:
    """The launch transpose() would make for a (batch, m, n) call of `elem_bytes`-byte
    elements with strides (ld_in, ld_out, bs_in, bs_out) from `src` into `dst`: the same
    lookup, flat-fit and first-call choice, and the same cache (permute's transpose passes).
    Only the pointers' alignment is kept (a first call measures on these very buffers).
    `outer` (a permute pass's two outer batch dims) makes it the config's outer variant,
    walking them in the same launch (`launch.make_launch`)."""
    et = word_type(elem_bytes)
    x, o = device_views(state, et, 3, shape, strides, src, dst)
    return launch_for(x, o, None, False, state, stream, ctx, outer)


def conjugate_launch(
    state: DeviceState, shape: tuple[int, ...], et: ElementType, src: int, dst: int
) -> Launch:
    """The launch transpose(x, conjugate=True) makes for a contiguous 2-D or batched 3-D
    `shape` of complex `et` from `src` into `dst` (the JAX FFI's conjugate transpose)."""
    row_major = [et.size * math.prod(shape[k + 1 :]) for k in range(len(shape))]
    b, m, n, ld, bs = matrix_layout("x", tuple(shape), tuple(row_major), et.size)  # 2-D or 3-D
    x, o = device_views(state, et, len(shape), (b, m, n), (ld, m, bs, m * n), src, dst)
    return launch_for(x, o, None, True, state, streams.LEGACY, state.ctx)


def device_views(
    state: DeviceState,
    et: ElementType,
    ndim: int,
    shape: tuple[int, int, int],
    strides: tuple[int, int, int, int],
    src: int,
    dst: int,
) -> tuple[View, View]:
    """The views of a (batch, m, n) call on raw device pointers, with strides (ld_in, ld_out,
    bs_in, bs_out) in elements: what the calls without an array of their own look up by."""
    b, m, n = shape
    ld_in, ld_out, bs_in, bs_out = strides
    x = View("device", None, src, ndim, b, m, n, ld_in, bs_in, None, et, state.ordinal)
    return x, x._replace(ptr=dst, m=n, n=m, ld=ld_out, bs=bs_out)


def flat_fits_call(cfg: KernelConfig, x: View, o: View) -> bool:
    """Whether flat `cfg` runs this call (`shapes.flat_fits`: the tuner filters by it too)."""
    return flat_fits(cfg, x.m, x.n, x.ld, o.ld)


def _key(x: View, o: View, config: Any, conjugate: bool, outer: Outer) -> tuple[Any, ...]:
    return (
        x.device,
        x.et.size,
        conjugate,
        config,
        x.batch,
        x.m,
        x.n,
        x.ld,
        x.bs,
        o.ld,
        o.bs,
        (x.ptr | o.ptr) & 15,
        outer,
    )


def launch_for(
    xv: View,
    ov: View,
    config: Any,
    conjugate: bool,
    state: DeviceState,
    stream: int | None = None,
    ctx: int | None = None,
    outer: Outer = NO_OUTER,
) -> Launch:
    """The prepared launch for a call signature, chosen once (`pick`) and kept. With the
    call's `stream` and `ctx`, a class nobody tuned is measured on the call's buffers first
    (`firstcall`)."""
    caches.fresh()
    key = _key(xv, ov, config, conjugate, outer)
    launch = caches.launches.recent(key)
    if launch is None:
        with caches.lock:
            launch = caches.launches.get(key) or pick(
                xv, ov, config, conjugate, state, stream, ctx, outer
            )
            caches.launches.keep(key, launch)
    return launch
