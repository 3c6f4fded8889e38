"""transpose_()'s kernels (templates/inplace/): one kernel per pass kind, element size,
conjugation and parameters, and the `at_inplace_args` struct every one of them takes.

Pure (no CUDA): `runtime/launch.make_inplace` packs the struct, `runtime/compiler` compiles
what `render_inplace` renders, and tests/test_inplace_kernels.py runs the rendered kernels on
the CPU (tests/_cuda_emulator.h) against plans/inplace.py's NumPy reference.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .._version import __version__
from ..errors import ShapeError
from ..kinds.base import WORD_TYPES
from ..kinds.inplace import DEFAULT, InplaceParams
from ..plans.dtypes import ELEMENT_SIZES
from ..plans.inplace import (
    CONJ,
    PASS_KINDS,
    PERMUTE,
    REVERSE,
    SHUFFLE,
    SPLIT,
    SWAP,
    InplacePlan,
)
from .codegen import _DTYPES_BY_SIZE, _environment

# at_inplace_args: m, n, batch, items, c, a, b, a_inv, tiles, split, row, segs, cycles, lanes,
# rows_per and a pad word, all 64-bit (standard sizes, no padding, as C lays it out)
ARG_FORMAT = "<16q"
ARG_BYTES = struct.calcsize(ARG_FORMAT)
ARG_NAMES = (
    "m",
    "n",
    "batch",
    "items",
    "c",
    "a",
    "b",
    "a_inv",
    "tiles",
    "split",
    "row",
    "segs",
    "cycles",
    "lanes",
    "rows_per",
    "pad",
)
# SHUFFLE's variants: rows read into shared memory, or (rows longer than shared memory
# holds) one row read from a global copy of it
PIECES = (SWAP, REVERSE, SPLIT, SHUFFLE, "shuffle_global", PERMUTE, CONJ)
_FILES = {
    SWAP: "swap",
    REVERSE: "reverse",
    SPLIT: "reverse",
    SHUFFLE: "shuffle",
    "shuffle_global": "shuffle",
    PERMUTE: "cycles",
    CONJ: "conj",
}
assert set(PASS_KINDS) <= set(PIECES)
# SHUFFLE: rows a block holds at once fill up to this much shared memory (one row at least,
# up to the device's opt-in): short rows several to a block, so that a block has work
SHUFFLE_BLOCK_BYTES = 32 << 10


@dataclass(frozen=True)
class InplaceKernel:
    """One in-place pass kernel: its piece, element size, whether it conjugates (complex64
    and complex128 only) and its parameters. Everything here reaches CUDA source, so it is
    all checked."""

    piece: str
    elem_bytes: int
    conjugate: bool = False
    params: InplaceParams = DEFAULT

    def __post_init__(self) -> None:
        if self.piece not in PIECES:
            raise ShapeError(f"in-place piece {self.piece!r}: one of {PIECES}")
        if self.elem_bytes not in ELEMENT_SIZES:
            raise ShapeError(
                f"in-place kernels of {self.elem_bytes}-byte elements; sizes are {ELEMENT_SIZES}"
            )
        if type(self.conjugate) is not bool or (self.conjugate and self.elem_bytes not in (8, 16)):
            raise ShapeError("a conjugating in-place kernel moves 8- or 16-byte complex elements")
        if not isinstance(self.params, InplaceParams):
            raise ShapeError("an in-place kernel's params are an InplaceParams")
        if self.piece == SWAP and not self.params.fits(self.elem_bytes):
            raise ShapeError(
                f"SWAP tiles of {self.params.tile} {self.elem_bytes}-byte elements need "
                f"{self.params.swap_smem(self.elem_bytes)} bytes of static shared memory; "
                "use a smaller tile"
            )

    @property
    def name(self) -> str:
        conj = "_c" if self.conjugate else ""
        key = self.params.key.replace(".", "_")
        return f"at_inplace_{self.piece}_s{self.elem_bytes}{conj}_{key}"


def render_inplace(k: InplaceKernel) -> str:
    """CUDA source of kernel `k` (`k.name`)."""
    if not isinstance(k, InplaceKernel):  # checked specs only reach CUDA
        raise TypeError("render_inplace() takes an InplaceKernel")
    p = k.params
    return (
        _environment()
        .get_template("inplace/inplace.cu.j2")
        .render(
            version=__version__,
            name=k.name,
            piece=k.piece,
            file=_FILES[k.piece],
            split=k.piece == SPLIT,
            from_global=k.piece == "shuffle_global",
            s=k.elem_bytes,
            t=WORD_TYPES[k.elem_bytes],
            dtypes=_DTYPES_BY_SIZE[k.elem_bytes],
            conjugate=k.conjugate,
            imag_word="y" if k.elem_bytes == 8 else "w",
            threads=p.threads,
            tile=p.tile,
            unroll=p.unroll,
            per_lane=p.per_lane(k.elem_bytes),
            key=p.key,
            args_bytes=ARG_BYTES,
        )
    )


@dataclass(frozen=True)
class PassLaunch:
    """One pass as launched: its kernel, blocks, `at_inplace_args` values by name, dynamic
    shared bytes, and its second pointer (`aux`: "leaders" for PERMUTE's table, "row" for
    a long-row SHUFFLE's scratch, "" for none). A long-row SHUFFLE is `rows` launches of
    one row of `row_bytes` each (the `row` argument set per launch, after the row is copied
    to the scratch)."""

    kind: str
    spec: InplaceKernel
    blocks: int
    args: dict[str, int] = field(compare=False)
    smem: int
    aux: str
    moved_bytes: int
    rows: int = 0
    row_bytes: int = 0


def pass_launches(
    plan: InplacePlan,
    elem_bytes: int,
    params: InplaceParams,
    multiprocessors: int,
    shared_optin: int,
    cycles: int,
) -> tuple[PassLaunch, ...]:
    """How `plan`'s passes launch on a GPU of `multiprocessors` SMs that lets a block opt in
    to `shared_optin` bytes of shared memory, PERMUTE walking `cycles` cycles (pure: the
    CPU tests launch exactly these on the emulator). Every grid is at most blocks_per_sm
    blocks an SM; the kernels walk their items by the grid stride."""
    cap = multiprocessors * params.blocks_per_sm
    batch, m, n = plan.batch, plan.m, plan.n
    common = {"m": m, "n": n, "batch": batch, "c": plan.c, "a": plan.a, "b": plan.b}
    common["a_inv"] = plan.a_inv
    out: list[PassLaunch] = []
    for p in plan.passes:
        spec = InplaceKernel(p.kind, elem_bytes, p.conjugate, params)
        moved = p.moved_bytes(plan, elem_bytes)
        smem, aux, rows = 0, "", 0
        if p.kind == SWAP:
            tiles = -(-m // params.tile)
            items = batch * tiles * (tiles + 1) // 2
            blocks, args = items, {"items": items, "tiles": tiles}
        elif p.kind in (REVERSE, SPLIT):
            lanes = min(params.threads, 1 << (n - 1).bit_length())
            items = batch * (m // 2)
            blocks = -(-items // (params.threads // lanes))
            args = {"items": items, "lanes": lanes, "split": p.split}
        elif p.kind == SHUFFLE and n * elem_bytes <= shared_optin:
            # rows a block: what SHUFFLE_BLOCK_BYTES holds, fewer where that would leave
            # SMs without a block
            spread = -(-(batch * m) // (2 * multiprocessors))
            rows_per = max(1, min(SHUFFLE_BLOCK_BYTES // (n * elem_bytes), spread))
            items = -(-(batch * m) // rows_per)
            blocks, args = items, {"items": items, "rows_per": rows_per}
            smem = rows_per * n * elem_bytes
        elif p.kind == SHUFFLE:  # a row at a time, through the row scratch
            spec = InplaceKernel("shuffle_global", elem_bytes, p.conjugate, params)
            blocks, args = -(-n // params.threads), {"items": n}
            aux, rows = "row", batch * m
        elif p.kind == PERMUTE:
            if not cycles:
                continue
            segs = -(-n // (32 * params.per_lane(elem_bytes)))
            items = batch * cycles * segs
            blocks, aux = -(-items // params.warps), "leaders"
            args = {"items": items, "segs": segs, "cycles": cycles}
        else:  # CONJ
            items = batch * m * n
            blocks, args = -(-items // params.threads), {"items": items}
        out.append(
            PassLaunch(
                p.kind,
                spec,
                max(1, min(blocks, cap)),
                {**common, **args},
                smem,
                aux,
                moved,
                rows,
                n * elem_bytes if rows else 0,
            )
        )
    return tuple(out)
