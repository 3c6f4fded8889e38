"""The pattern's ceiling (`bench --ceiling`): for a served call, launches that read and write
exactly the words its launches do, in the same grid and tile order, with no exchange
(templates/pattern/, from `pattern.TileAccess`). Timed beside ours and the copy, they split
a call's loss into what its access pattern costs (pattern / copy) and what the kernel adds
to it (ours / pattern: instructions, shared memory, barriers, latency).

A packed or vector box pass's pattern moves each box as runs along the input's innermost box
dim in and the output's out (`pattern.BoxAccess`). What has no exchange is its own pattern: a
row copy, a realigned copy, a gather and a device-to-device copy run as they are.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass, replace
from typing import Any

from ..kernels.codegen import template_dir
from ..kernels.packed import ARG_FORMAT as PACKED_FORMAT
from .pattern import (
    NO_TRAFFIC,
    BoxAccess,
    TileAccess,
    Traffic,
    box_access,
    box_traffic,
    copy_traffic,
    launch_access,
    traffic,
)

TEMPLATE = "pattern/pattern.cu.j2"
# `at_pattern_args` (templates/pattern/pattern.cu.j2): M, N, then strides in bytes (ld_in,
# ld_out, bs_in, bs_out, os_in, os_out, os2_in, os2_out), batch, outer2, tiles_fast,
# tiles_slow, tiles_total, z's ld, bs, os and os2, and z's address; no padding
ARG_FORMAT = "<19qQ"
ARG_BYTES = struct.calcsize(ARG_FORMAT)
# `at_box_args`: in_stride, out_stride, extent (per box dim), tile_in, tile_out, tiles_of (per
# grid dim), 8 each, then the boxes in all
BOX_DIMS = 8
BOX_ARG_FORMAT = f"<{6 * BOX_DIMS + 1}q"
BOX_ARG_BYTES = struct.calcsize(BOX_ARG_FORMAT)
WORD_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "u32", 8: "uint2", 16: "uint4"}

_kernels: dict[tuple[str, str], Any] = {}


def _lanes(words: int, threads: int) -> int:
    """Threads a row's words take: the power of two at or under them, at most the tile's."""
    return min(threads, 1 << max(0, words.bit_length() - 1))


def params(a: TileAccess, served: str = "") -> dict[str, Any]:
    """What templates/pattern/tile.cu.j2 renders for `a` (its name a hash of the rest)."""
    si, so = a.in_bytes, a.out_bytes
    strides_in = (a.ld_in * si, a.bs_in * si, a.base_in, *(s * si for _, s, _ in a.outer))
    exact = all(x % a.in_word == 0 for x in strides_in) and a.tile_n * si % a.in_word == 0
    wi_words = -(-a.tile_n * si // a.in_word) + (0 if exact else 1)
    wo_words = -(-a.tile_m * so // a.out_word) + (a.out_word > so)
    wz_words = -(-a.tile_n * so // a.out_word) + (a.out_word > so)
    k = {
        "tm": a.tile_m,
        "tn": a.tile_n,
        "si": si,
        "so": so,
        "win": a.in_word,
        "wout": a.out_word,
        "in_t": WORD_TYPES[a.in_word],
        "out_t": WORD_TYPES[a.out_word],
        "halo": a.halo,
        "window": a.window,
        "threads": a.threads,
        "walkers": a.walkers,
        "raster": a.raster,
        "cache": a.cache,
        "z": bool(a.z_ld),
        "wi_words": wi_words,
        "wo_words": wo_words,
        "wz_words": wz_words,
    }
    digest = hashlib.sha256(repr(sorted(k.items())).encode()).hexdigest()[:12]
    return {**k, "name": f"at_pattern_{digest}", "served": served or a.kind}


def box_params(a: BoxAccess, served: str = "") -> dict[str, Any]:
    """What templates/pattern/box.cu.j2 renders for `a`."""
    nb = len(a.box)
    sides = []
    for op, side, run, order, w in (
        ("load", "in", a.in_run, a.in_order, a.in_word),
        ("store", "out", a.out_run, tuple(range(nb)), a.out_word),
    ):
        w = w if run is not None else a.elem_bytes
        # words covering a run; one more where a word is wider than the element (a run
        # may start inside one)
        words = -(-a.box[run] * a.elem_bytes // w) + (w > a.elem_bytes) if run is not None else 1
        dims = [d for d in order if d != run]
        sides.append({
            "op": op, "side": side, "run": run, "dims": dims, "w": w, "word_t": WORD_TYPES[w],
            "words": words, "lanes": _lanes(words, a.threads),
            "rows": math.prod(a.box[d] for d in dims),
            "ptr": "const unsigned char*" if op == "load" else "unsigned char*",
        })  # fmt: skip
    k = {
        "box": a.box,
        "in_order": a.in_order,
        "checked": a.checked,
        "ngrid": len(a.tiles_of),
        "e": a.elem_bytes,
        "threads": a.threads,
        "cache": "default",
        "load": sides[0],
        "store": sides[1],
    }
    digest = hashlib.sha256(repr(sorted(k.items())).encode()).hexdigest()[:12]
    return {**k, "name": f"at_pattern_box_{digest}", "served": served or a.kind}


def box_scalars(a: BoxAccess) -> tuple[int, ...]:
    """`at_box_args` for `a`."""

    def pad(v: tuple[int, ...], fill: int = 0) -> tuple[int, ...]:
        return (*v, *[fill] * (BOX_DIMS - len(v)))

    return (
        *pad(a.in_stride),
        *pad(a.out_stride),
        *pad(a.extent, 1),
        *pad(a.tile_in),
        *pad(a.tile_out),
        *pad(a.tiles_of, 1),
        a.tiles,
    )


def render(kernels: list[dict[str, Any]]) -> str:
    """The pattern kernels' CUDA source."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    return env.get_template(TEMPLATE).render(
        kernels=kernels, args_bytes=ARG_BYTES, box_args_bytes=BOX_ARG_BYTES
    )


def scalars(a: TileAccess, z: int = 0) -> tuple[int, ...]:
    """`at_pattern_args` for `a` (z: the same-order output's address, 0 for none)."""
    si, so = a.in_bytes, a.out_bytes
    outer = [(1, 0, 0)] * (2 - len(a.outer)) + list(a.outer)
    z_outer = [0] * (2 - len(a.z_outer)) + list(a.z_outer)
    rt, ct = a.row_tiles, a.col_tiles
    fast, slow = (ct, rt) if a.raster == "row" else (rt, ct)
    return (
        a.m,
        a.n,
        a.ld_in * si,
        a.ld_out * so,
        a.bs_in * si,
        a.bs_out * so,
        outer[0][1] * si,
        outer[0][2] * so,
        outer[1][1] * si,
        outer[1][2] * so,
        a.batch,
        outer[1][0],
        fast,
        slow,
        a.tiles,
        a.z_ld * so,
        a.z_bs * so,
        z_outer[0] * so,
        z_outer[1] * so,
        z,
    )


def pattern_launch(state: Any, a: TileAccess | BoxAccess, z: int = 0, served: str = "") -> Any:
    """A prepared launch of `a`'s pattern kernel (compiled once per process and geometry),
    run like any `runtime.launch.Launch`: (src, dst, stream)."""
    from ..runtime.compiler import load_source
    from ..runtime.launch import Launch

    if isinstance(a, BoxAccess):
        k, values, fmt = box_params(a, served), box_scalars(a), BOX_ARG_FORMAT
    else:
        k, values, fmt = params(a, served), scalars(a, z), ARG_FORMAT
    key = (state.arch, k["name"])
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = _kernels[key] = load_source(state.arch, render([k]), [k["name"]])[k["name"]]
    return Launch(None, kernel, a.grid, (a.threads, 1, 1), values, state, fmt)


@dataclass(frozen=True)
class Ceiling:
    """A call's pattern: `run(src, dst, stream)` its launches (None: no pattern kernel for
    one of its passes, `note` says which), and the sectors its launches touch (None where a
    pass's are not modelled: a row copy's or a gather's)."""

    run: Any
    traffic: Traffic | None
    note: str


def transpose_ceiling(state: Any, launch: Any, nbytes: int, wide: bool = False) -> Ceiling:
    """The pattern of transpose()'s launch (a config's, or a row copy: its own pattern).
    `wide`: its rows and windows moved in aligned 16-byte words whatever width the served
    kernel moves (`widened`)."""
    if launch.config is None:  # one column or row a matrix: a copy has no exchange
        return Ceiling(launch, copy_traffic(nbytes), "row copy: its own pattern")
    a = launch_access(launch.config, launch.scalars, launch.grid)
    if wide:
        a = widened(a)
    return Ceiling(pattern_launch(state, a, served=launch.config.key), traffic(a), a.note)


# The word a wide pattern moves (`widened`: `transpose_ceiling(wide=True)`,
# `permute_ceiling(wide=True)`)
WIDE_WORD = 16


def widened(a: TileAccess | BoxAccess) -> Any:
    """A pattern moved in aligned WIDE_WORD-byte words: a tile's rows and output windows, a
    box pass's runs (each side's, where it has one). An aligned 16-byte word lies in one
    32-byte sector, so the words covering a range touch exactly its sectors: the same traffic
    in fewer instructions. Where the served words are narrower, the pattern kernel can be
    bound by its own instructions (4- to 16-byte tiles ran at 106-120% of their pattern on
    the H200); this is the sectors' own ceiling. A word may reach up to 15 bytes past a
    range's ends, within its sectors and the bench's buffers (rounded to 256 bytes, a guard
    after the output)."""
    if isinstance(a, TileAccess):
        return replace(
            a,
            in_word=WIDE_WORD,
            out_word=WIDE_WORD,
            note=f"{a.kind} tile's rows and windows in {WIDE_WORD}-byte words",
        )
    return replace(
        a,
        in_word=WIDE_WORD if a.in_run is not None else a.in_word,
        out_word=WIDE_WORD if a.out_run is not None else a.out_word,
        note=f"{a.kind} runs in {WIDE_WORD}-byte words",
    )


def narrow(a: TileAccess | BoxAccess) -> bool:
    """Whether widening `a` changes its words (what a wide pattern row is timed for)."""
    w = widened(a)
    return (w.in_word, w.out_word) != (a.in_word, a.out_word)


def transpose_widens(launch: Any) -> bool:
    """Whether transpose()'s launch moves words under WIDE_WORD (a wide pattern row of its own)."""
    if launch.config is None:
        return False
    return narrow(launch_access(launch.config, launch.scalars, launch.grid))


def widens(plan: Any, steps: tuple[Any, ...]) -> bool:
    """Whether a permute's passes move words under WIDE_WORD somewhere (its transpose passes'
    rows or windows, its box passes' runs): a wide pattern row of its own."""
    for p, step in zip(plan.passes, steps, strict=True):
        launch = step.launch
        if launch is not None and (launch.config is not None or launch.arg_format == PACKED_FORMAT):
            if narrow(_pass_access(launch, p)):
                return True
    return False


def permute_ceiling(state: Any, plan: Any, steps: tuple[Any, ...], wide: bool = False) -> Ceiling:
    """The pattern of a permute's steps (`dispatch.permute.Step`s, one per pass of `plan`),
    step for step at the same offsets: transpose and box passes by their pattern kernels,
    copies and gathers as they are. `wide`: transpose and box passes move their rows,
    windows and runs in aligned 16-byte words whatever width the served kernel moves
    (`widened`: the same sectors in fewer instructions)."""
    from ..dispatch.permute import Step

    out: list[Any] = []
    total: Traffic | None = NO_TRAFFIC
    notes: list[str] = []
    for p, step in zip(plan.passes, steps, strict=True):
        launch = step.launch
        if launch is None:  # a device-to-device copy
            out.append(step)
            if total is not None:
                for i, o in step.offsets:
                    total = total + copy_traffic(step.nbytes, i, o)
            continue
        if launch.config is not None or launch.arg_format == PACKED_FORMAT:
            a = _pass_access(launch, p)
            if wide:
                a = widened(a)
            out.append(Step(pattern_launch(state, a, served=_served(launch, p)), step.nbytes, step.offsets))  # fmt: skip
            if total is not None:
                found = traffic if isinstance(a, TileAccess) else box_traffic
                total = total + found(a, step.offsets)
            if a.note:
                notes.append(a.note)
            continue
        out.append(step)  # a row copy, realigned copy or gather: no exchange to take out
        total = None
        notes.append(f"{launch.kernel.name}: its own pattern")

    def run(src: int, dst: int, _stream: Any) -> None:
        for step in out:
            step.run(src, dst, 0, state.ctx)

    return Ceiling(run, total, "; ".join(dict.fromkeys(notes)))


def _pass_access(launch: Any, p: Any) -> TileAccess | BoxAccess:
    """A transpose launch's tiles, or a box pass's boxes (`p`: the plan's pass)."""
    if launch.config is not None:
        return launch_access(launch.config, launch.scalars, launch.grid)
    from ..kernels.packed import packed_args

    vbox = p.vectors != (0, 0)
    args = packed_args(
        p.elem_bytes,
        p.dims,
        p.box,
        words=False if vbox else None,
        spread=False if vbox else None,
        realign_out=p.realign_out,
    )
    a = box_access(args, p.elem_bytes, launch.grid, launch.block[0])
    if vbox:  # whole vectors each side
        a = replace(a, in_word=p.vectors[0] or a.in_word, out_word=p.vectors[1] or a.out_word,
                    kind="vbox")  # fmt: skip
    return a


def _served(launch: Any, p: Any) -> str:
    return launch.config.key if launch.config is not None else launch.kernel.name


def cast_ceiling(state: Any, cfg: Any, plan: Any, x: int, y: int, z: int) -> Ceiling:
    """The pattern of a cast call's launches (`plans.cast.CastPlan` of config `cfg`) on x, y
    and z (0: none) at these addresses."""
    from .pattern import cast_access

    if plan.two_pass or not all(lc.transpose for lc in plan.launches):
        return Ceiling(None, None, "cast in two passes or in x's order: no pattern kernel")
    launches, total, note = [], NO_TRAFFIC, ""
    for lc in plan.launches:
        a = cast_access(cfg, lc, x, y)
        zp = z + lc.r0 * a.out_bytes if lc.rides else 0
        src, dst = x + lc.x0 * a.in_bytes, y + lc.o0 * a.out_bytes
        launches.append((pattern_launch(state, a, zp, served=cfg.key), src, dst))
        total, note = total + traffic(a), a.note

    def run(*_: Any) -> None:
        for launch, src, dst in launches:
            launch(src, dst, 0)

    return Ceiling(run, total, note)
