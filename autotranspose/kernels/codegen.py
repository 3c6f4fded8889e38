"""Rendering: KernelConfig -> CUDA C source through the Jinja2 templates in `templates/`.

Rendering needs neither a GPU nor pycuda. Every stored tuning result carries the version of
its own kernel (`kernel_version`: a hash of that kernel's rendered source, the nvcc options and
the config schema), so a result is served only while the kernel it measured is the one that
would run, and survives edits to other kernels and to how the templates are laid out.
"""

from __future__ import annotations

import functools
import hashlib
import math
import struct
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import jinja2

from .. import kinds
from .._version import __version__
from ..kinds.base import WORD_TYPES
from .config import CONFIG_SCHEMA, KernelConfig
from .gather import ARG_BYTES as GATHER_ARG_BYTES, MAX_DIMS as GATHER_MAX_DIMS
from .packed import (
    ARG_BYTES as PACKED_ARG_BYTES,
    MAX_BOX_DIMS,
    MAX_GRID_DIMS,
    THREADS as PACKED_THREADS,
    WORDS_LOAD_BATCH,
    PackedKernel,
)

# What nvcc is told besides the architecture: part of what a kernel is (compiler.py compiles
# with these), so part of its version.
NVCC_OPTIONS: tuple[str, ...] = ("-O3", "-lineinfo")
# The template of each kind of tuned kernel is its policy's (`Kind.template`, autotranspose/kinds/),
# in the kind's folder of templates/. Kernels that are not tuned configs, as folders or files
# of templates/: a peer, the measuring helpers, permute's row copies, gathers and packed
# boxes (outside template_version: editing them starts no tuning study over).
SEED_TEMPLATE = "seed/seed.cu.j2"
SUPPORT_TEMPLATE = "common/support.cu.j2"
ROWS_TEMPLATE = "rows/rows.cu.j2"
GATHER_TEMPLATE = "gather/gather.cu.j2"
PACKED_TEMPLATE = "packed/packed.cu.j2"
VBOX_TEMPLATE = "vbox/vbox.cu.j2"
UNTUNED_TEMPLATES = (
    "seed",
    SUPPORT_TEMPLATE,
    "rows",
    "gather",
    "packed",
    "vbox",
    "cast",
    "pattern",
    "inplace",
)
# cast-transposes (cast/) are served by their pair's default, not tuned (kinds/cast.py);
# pattern/ holds `bench --ceiling`'s kernels, which serve no call (autotranspose/bench/ceiling.py);
# inplace/ the in-place transposes' passes, whose studies (`tune --inplace`) are named by the
# version of their own programs instead (tuner/study/inplace.py)
# permute()'s row copies: threads per block, and rows each thread carries at once
ROWS_THREADS, ROWS_UNROLL = 256, 4
# the row kernels' `at_rows_args` struct (templates/rows/): M, N, ld_in, ld_out, bs_in,
# bs_out, os_in, os_out, os2_in, os2_out; lanes, batch, chunk, outer2, per_block and line (the
# skewed kernel's store line, launch.row_store_line; 0 for the unskewed one). Standard sizes,
# no padding, as C lays it out; the template asserts the size.
ROWS_ARG_FORMAT = "<10q6I"
ROWS_ARG_BYTES = struct.calcsize(ROWS_ARG_FORMAT)
# the realigning row copy's `at_runs_args` (templates/rows/): n, in0, in1, rin_i,
# rout_i, rin_b, rout_b, os_in, os_out, os2_in, os2_out (bytes); run, s0, ri, rb, outer2,
# lanes, per_block, chunk, words, n_magic, n_shift, s0_magic, s0_shift and a pad word.
RUNS_ARG_FORMAT = "<11q14I"
RUNS_ARG_BYTES = struct.calcsize(RUNS_ARG_FORMAT)
RUNS_KERNEL = "at_copy_runs"
# permute()'s gathers: threads per block, elements each thread loads before it stores, and
# the blocks per SM the registers must allow (__launch_bounds__; the grid is that many per
# SM, `launch.make_gather`): 4 x 256 threads is half an SM's 2048, with 4 loads in flight each.
GATHER_THREADS, GATHER_UNROLL, GATHER_BLOCKS_PER_SM = 256, 4, 4
# permute()'s packed boxes: threads per block; how many of a thread's stores the compiler
# unrolls (a 1-byte box of 16384 elements is 64 per thread); and how many bytes of loads a
# thread issues before it stores them to shared memory (up to 8 loads: more bytes in flight)
# (threads per block, the table path and the blocks per SM: autotranspose/packed.py)
PACKED_UNROLL, PACKED_LOAD_BYTES = 4, 64
# A tuned kernel's "outer" variant (templates/common/outer.cu.j2), for permute's transpose
# passes: its last argument is an `at_outer_args` struct of tiles_total, batch; os_in, os_out,
# os2_in, os2_out; outer2 and one unused word. Standard sizes, no padding, as C lays it out.
OUTER_ARG_FORMAT = "<2I4q2I"
OUTER_ARG_BYTES = struct.calcsize(OUTER_ARG_FORMAT)
OUTER_SUFFIX = "_o"  # the variant's kernel name: the config's own, and this

_DTYPES_BY_SIZE = {
    1: "int8, uint8, bool",
    2: "float16, bfloat16, int16, uint16",
    4: "float32, int32, uint32",
    8: "float64, int64, uint64, complex64",
    16: "complex128",
}


def template_dir() -> Path:
    """The templates: inside the installed package, or `templates/` of a source checkout."""
    packaged = Path(__file__).resolve().parent.parent / "templates"
    if (packaged / "common" / "outer.cu.j2").is_file():
        return packaged
    checkout = Path(__file__).resolve().parent.parent.parent / "templates"
    if (checkout / "common" / "outer.cu.j2").is_file():
        return checkout
    raise FileNotFoundError(
        f"autotranspose's CUDA templates are missing (looked in {packaged} and {checkout}); "
        "reinstall the package"
    )


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _tuned_template(relative: str) -> bool:
    """Whether a template file (its path under templates/) is a tuned kernel's: any file but
    those of UNTUNED_TEMPLATES (a file, or a folder and everything in it)."""
    return not any(relative == u or relative.startswith(u + "/") for u in UNTUNED_TEMPLATES)


@functools.cache
def template_version() -> str:
    """Hash of every tuned kernel's template files, in every folder of templates/ (new ones
    included), and the config schema: names an Optuna study (its search state starts over when
    the kernels change). Stored results are versioned per kernel instead (`kernel_version`)."""
    h = hashlib.sha256(f"schema={CONFIG_SCHEMA}".encode())
    root = template_dir()
    for path in sorted(root.rglob("*.j2")):
        relative = path.relative_to(root).as_posix()
        if _tuned_template(relative):
            h.update(relative.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def kernel_version(config: KernelConfig, problem: str = "") -> str:
    """What a stored result of `config` measured: a hash of the config's own rendered kernel,
    the nvcc options and the config schema. Equal versions mean the same compiled kernel, so a
    result stays valid while other kernels, or the template files' layout, change. A
    program's config (`PROGRAM_SOURCES`) is versioned by the kernels its `problem`'s programs
    run (an in-place square's SWAP, and swap_lines with SWAP_LINES); problem "": every kernel
    its programs may run. A single kernel's version is its problem's too (rendered and hashed
    once, whatever the problem asked with)."""
    if not isinstance(config, KernelConfig):
        raise TypeError(f"kernel_version() takes a KernelConfig, got {type(config).__name__}")
    return _kernel_version(config, problem if not config.policy.single_kernel else "")


@functools.lru_cache(maxsize=8192)
def _kernel_version(config: KernelConfig, problem: str) -> str:
    h = hashlib.sha256(f"schema={CONFIG_SCHEMA}\noptions={' '.join(NVCC_OPTIONS)}\n".encode())
    h.update(kernel_source(config, problem).encode())
    return h.hexdigest()[:16]


# forget every version (after a template is patched in place, as tests do)
kernel_version.cache_clear = _kernel_version.cache_clear  # type: ignore[attr-defined]


def _common_params(c: KernelConfig) -> dict[str, object]:
    """What every kind of kernel's template needs: name, element, threads, hints."""
    return {
        "name": c.kernel_name,
        "s": c.elem_bytes,
        "threads": c.threads,
        "cache": c.cache,
        "conjugate": c.conjugate,
        "elem_t": WORD_TYPES[c.elem_bytes],
        "dtypes": _DTYPES_BY_SIZE[c.elem_bytes],
        "outer": False,
        "outer_bytes": OUTER_ARG_BYTES,
        # the blocks per SM the bounds ask for: the config's cap (tiled and staged kernels);
        # flat and byte-permute kernels derive their own and override this
        "min_blocks": c.min_blocks or 1,
    }


def kernel_params(c: KernelConfig) -> dict[str, object]:
    """Everything the template needs about one config, derived here so the template only lays
    out code: what every kind's template needs, and the kind's own (`Kind.params`)."""
    return {**_common_params(c), **c.policy.params(c)}


def _render_kernels(template: str, kernels: list[dict[str, object]]) -> str:
    return _environment().get_template(template).render(kernels=kernels)


# The sources of configs that are programs of kernels (`Kind.single_kernel` False), by kind:
# registered by the module that renders them (kernels/inplace.py), which builds on this one
PROGRAM_SOURCES: dict[str, Callable[[KernelConfig, str], str]] = {}


def kernel_source(config: KernelConfig, problem: str = "") -> str:
    """The CUDA C of `config`'s kernel alone, without the file header: what `kernel_version`
    hashes. (`persistent` is a launch parameter: configs differing only there share it.) A
    program's config: every kernel its programs of `problem` may run (`PROGRAM_SOURCES`);
    a single kernel's ignores `problem`."""
    if not config.policy.single_kernel:
        source = PROGRAM_SOURCES.get(config.kind)
        if source is None:
            raise TypeError(
                f"a {config.kind} config is a program of kernels whose module has not "
                "registered its source; import autotranspose (it registers them)"
            )
        return source(config, problem)
    return _render_kernels(config.policy.template, [kernel_params(config)])


def _single(configs: Iterable[KernelConfig]) -> list[KernelConfig]:
    """`configs`, each one kernel codegen renders (a TypeError for a program's config)."""
    found = list(configs)
    for c in found:
        if not c.policy.single_kernel:
            raise TypeError(
                f"config {c.key} is a program of {c.kind} kernels, not one kernel: its own module "
                "renders its kernels (kernels/inplace.py for in-place transposes)"
            )
    return found


def kernel_name(config: KernelConfig, outer: bool = False) -> str:
    """The `extern "C"` name of `config`'s kernel, or of its outer variant."""
    return config.kernel_name + (OUTER_SUFFIX if outer else "")


def _outer_params(c: KernelConfig) -> dict[str, object]:
    """The outer variant of a config's kernel: the same tile code, its batch index walked as
    three dims (templates/common/outer.cu.j2). Not hashed into `kernel_version`: it runs the
    tuned kernel's tiles on the matrices permute's plan finds, as host loops did before."""
    return {**kernel_params(c), "outer": True, "name": kernel_name(c, True)}


def render_outer(configs: Iterable[KernelConfig]) -> str:
    """One translation unit of the configs' outer variants (`_outer_params`)."""
    unique = list({c.kernel_name: c for c in _single(configs)}.values())
    parts = [f"// Generated by autotranspose {__version__}: outer variants. Do not edit."]
    for kind in kinds.all_kinds():
        group = [_outer_params(c) for c in unique if c.policy is kind]
        if group:
            parts.append(_render_kernels(kind.template, group))
    return "\n".join(parts)


def render_many(configs: Iterable[KernelConfig]) -> str:
    """One translation unit holding a kernel per distinct kernel name (compiled in a single nvcc
    call); configs that differ only in launch parameters (`persistent`) share their kernel.
    Each kind of kernel has its own template (`Kind.template`), rendered in the kinds'
    registration order (an empty file: the tiled template's preamble)."""
    unique = list({c.kernel_name: c for c in _single(configs)}.values())
    parts = [f"// Generated by autotranspose {__version__}. Do not edit."]
    for kind in kinds.all_kinds():
        group = [kernel_params(c) for c in unique if c.policy is kind]
        if group or (kind.name == "tiled" and not unique):
            parts.append(_render_kernels(kind.template, group))
    return "\n".join(parts)


_ELEMENT_TYPES = [
    (1, "unsigned char"),
    (2, "unsigned short"),
    (4, "u32"),
    (8, "uint2"),
    (16, "uint4"),
]


def render_support() -> str:
    """Measurement helpers: random fill, naive reference transpose, mismatch count."""
    return (
        _environment()
        .get_template(SUPPORT_TEMPLATE)
        .render(element_types=_ELEMENT_TYPES, version=__version__)
    )


def render_seed() -> str:
    """The seed documents' kernel for every element size (a peer in `autotranspose bench`)."""
    source = (
        _environment()
        .get_template(SEED_TEMPLATE)
        .render(element_types=_ELEMENT_TYPES, version=__version__)
    )
    return "typedef unsigned int u32;\n" + source


def row_kernel_name(elem_bytes: int, skew: bool = False) -> str:
    """permute()'s row copy of `elem_bytes`-byte words, its stores skewed to start on a line
    or not (`launch.row_store_line`)."""
    return f"at_copy_rows_s{elem_bytes}" + ("_skew" if skew else "")


ROW_KERNELS = (
    *(row_kernel_name(s, k) for s, _ in _ELEMENT_TYPES for k in (False, True)),
    RUNS_KERNEL,
)


def gather_kernel_name(elem_bytes: int) -> str:
    """permute()'s one-launch gather of `elem_bytes`-byte elements."""
    return f"at_gather_s{elem_bytes}"


GATHER_KERNELS = tuple(gather_kernel_name(s) for s, _ in _ELEMENT_TYPES)


def render_rows() -> str:
    """permute()'s strided row copies, two kernels per element size and the realigning one
    (ROW_KERNELS)."""
    return (
        _environment()
        .get_template(ROWS_TEMPLATE)
        .render(
            element_types=_ELEMENT_TYPES,
            version=__version__,
            threads=ROWS_THREADS,
            unroll=ROWS_UNROLL,
            args_bytes=ROWS_ARG_BYTES,
            runs_args_bytes=RUNS_ARG_BYTES,
        )
    )


def render_gather(
    threads: int = GATHER_THREADS,
    unroll: int = GATHER_UNROLL,
    min_blocks: int = GATHER_BLOCKS_PER_SM,
) -> str:
    """permute()'s one-launch gathers, one kernel per element size (GATHER_KERNELS); other
    launch shapes than the served one for measuring them (dev/gather_variants.py)."""
    return (
        _environment()
        .get_template(GATHER_TEMPLATE)
        .render(
            element_types=_ELEMENT_TYPES,
            version=__version__,
            threads=threads,
            unroll=unroll,
            min_blocks=min_blocks,
            max_dims=GATHER_MAX_DIMS,
            args_bytes=GATHER_ARG_BYTES,
            dtypes=_DTYPES_BY_SIZE,
        )
    )


def render_packed(kernels: Iterable[PackedKernel]) -> str:
    """permute()'s packed-box kernels (`PackedKernel.name` each), in one source."""
    specs = list(kernels)
    if not all(isinstance(k, PackedKernel) for k in specs):  # checked specs only reach CUDA
        raise TypeError("render_packed() takes PackedKernel specs")
    return (
        _environment()
        .get_template(PACKED_TEMPLATE)
        .render(
            kernels=[_packed_vars(k) for k in specs],
            version=__version__,
            threads=PACKED_THREADS,
            max_box=MAX_BOX_DIMS,
            max_grid=MAX_GRID_DIMS,
            args_bytes=PACKED_ARG_BYTES,
        )
    )


def _packed_vars(k: PackedKernel) -> dict[str, object]:
    """The template's view of one packed kernel: the index arithmetic as C expressions."""
    dims = range(len(k.box))
    dense = [1]
    for b in k.box[:-1]:
        dense.append(dense[-1] * b)
    steps = k.steps
    batch = min(steps, 8, max(1, PACKED_LOAD_BYTES // k.elem_bytes))
    # the split path's loads before their stores: where a table holds its registers, that
    # path moves only the boxes an edge cuts, two loads at a time
    dbatch = min(batch, 2) if k.table else batch
    dsteps = -(-steps // dbatch) * dbatch  # whole batches: the tail's loads are masked
    shift = (128 // k.elem_bytes).bit_length() - 1  # elements per 128-byte bank row
    pad = max(1, 4 // k.elem_bytes)  # one 4-byte bank (or one element) per row
    assert PACKED_THREADS % (1 << shift) == 0  # the table's write slots step by a constant
    return {
        "spec": k,
        "type": dict(_ELEMENT_TYPES)[k.elem_bytes],
        "dims": list(dims),
        "checked": [d for d in dims if k.checked[d]],
        "inside": " && ".join(f"d{d} < lim{d}" for d in dims if k.checked[d]) or "true",
        "shared": " + ".join(f"d{d} * {dense[d]}u" for d in dims),
        "in_offset": " + ".join(f"(off_t)d{d} * is{d}" for d in dims),
        "out_offset": " + ".join(f"(off_t)d{d} * os{d}" for d in dims),
        "dsteps": dsteps,
        "ragged": dsteps * PACKED_THREADS != k.volume,
        "batch": batch,
        "dbatch": dbatch,
        "unroll": min(dsteps, PACKED_UNROLL),
        "shift": shift,
        "pad": pad,
        "smem": (smem := k.volume + ((k.volume - 1) >> shift) * pad),
        "smem_bytes": smem * k.elem_bytes * (2 if k.pipelined else 1),  # pipelined: two buffers
        "ragged_table": steps * PACKED_THREADS != k.volume,
        "wstride": PACKED_THREADS + (PACKED_THREADS >> shift) * pad,
        "full": " && ".join(f"lim{d} == {k.box[d]}u" for d in dims if k.checked[d]) or "true",
        **(_packed_word_vars(k, dense) if k.words else {}),
        **(_packed_spread_vars(k, dense) if k.spread else {}),
    }


def spread_layout(k: PackedKernel) -> tuple[int, int | None]:
    """(pitch, sh): the spread kernel's shared layout (templates/packed/spread.cu.j2). Slab t
    of the input's innermost box dim i0 (the elements before it in output order) starts at
    t * pitch + 4 * (t >> sh) bytes (sh None: no extra word). Dense (pitch = the slab's bytes)
    where the output's run spans i0 and its words would cross slabs; else, of dense and pitches of an
    odd count of words with a word more every 2**sh slabs, the one whose first warp's spread
    stores and word loads conflict least (then the least shared memory), within the static
    48 KiB."""
    kk, i0 = k.block, k.in_order[0]
    slab = _spread_inner(k)[-1]
    dense = (slab, None)
    if i0 < k.out_run and slab % 4:
        return dense
    odd = -(-slab // 4) | 1
    options = [dense] + [(4 * odd, sh) for sh in range((kk - 1).bit_length(), 9)]
    best, best_key = dense, None
    for pitch, sh in options:
        size = _spread_bytes(k, pitch, sh)
        if size > SPREAD_MAX_SHARED:
            continue
        key = (spread_conflicts(k, pitch, sh), size)
        if best_key is None or key < best_key:
            best, best_key = (pitch, sh), key
    return best


SPREAD_MAX_SHARED = 48 << 10


def _spread_inner(k: PackedKernel) -> list[int]:
    """Byte strides in the shared box of the box dims before i0 (0 from i0 on), then the
    slab's bytes. Dense in output order, except that the realigned kernel lays its runs an
    odd count of words apart where dims lie between the run and i0 (`out_run` < i0): dense,
    a warp's spread stores step along such a dim a run apart, and runs of 128 bytes put all
    32 lanes on one bank (H200, uint8 2637x3025x4x2 by (3,1,2,0) in boxes of 128 x 64 x 2:
    62.0M shared bank conflicts against the element kernel's 2.0M, 10.7% of a copy against
    19.4)."""
    e, i0, t = k.elem_bytes, k.in_order[0], k.out_run
    out, step = [], e
    for d in range(len(k.box)):
        if d >= i0:
            out.append(0)
            continue
        if k.realign_out and d == t:  # a run's pitch: whole words, an odd count of them
            step = 4 * (-(-step // 4) | 1)
        out.append(step)
        step *= k.box[d]
    return [*out, step]


def _spread_base(t: int, pitch: int, sh: int | None) -> int:
    return t * pitch + (4 * (t >> sh) if sh is not None else 0)


def _spread_strides(k: PackedKernel, pitch: int, sh: int | None) -> list[int]:
    """Bytes between consecutive indices of each box dim after i0 in shared memory."""
    i0, out = k.in_order[0], []
    step = _spread_base(k.box[i0], pitch, sh)  # dense or whole words: never rounded
    for d in range(len(k.box)):
        if d > i0:
            out.append(step)
            step *= k.box[d]
        else:
            out.append(0)
    out.append(step)  # the whole box
    return out


def _spread_bytes(k: PackedKernel, pitch: int, sh: int | None) -> int:
    return -(-_spread_strides(k, pitch, sh)[-1] // 16) * 16


def _spread_address(
    k: PackedKernel,
    digits: Sequence[int],
    pitch: int,
    sh: int | None,
    strides: Sequence[int],
    inner: Sequence[int],
) -> int:
    """The shared byte address of the box element of `digits` (`strides`: `_spread_strides`;
    `inner`: `_spread_inner`)."""
    i0 = k.in_order[0]
    a = 0
    for d, x in enumerate(digits):
        if d < i0:
            a += x * inner[d]
        elif d == i0:
            a += _spread_base(x, pitch, sh)
        else:
            a += x * strides[d]
    return a


def _spread_read_ext(k: PackedKernel) -> list[int]:
    """A read step's digit extents: words of K along i0, elements along the other box dims."""
    i0 = k.in_order[0]
    return [-(-b // k.block) if d == i0 else b for d, b in enumerate(k.box)]


def _digits_of(i: int, order: Sequence[int], ext: Sequence[int]) -> dict[int, int]:
    out = {}
    for d in order:
        out[d] = i % ext[d]
        i //= ext[d]
    return out


def spread_conflicts(k: PackedKernel, pitch: int, sh: int | None) -> int:
    """Shared wavefronts of the first warp's spread stores (each of a word's K elements) and
    of its word loads on the output side."""
    kk, i0, n = k.block, k.in_order[0], len(k.box)
    rext, strides, inner = _spread_read_ext(k), _spread_strides(k, pitch, sh), _spread_inner(k)
    total = 0
    for m in range(kk):
        banks: dict[int, set[int]] = {}
        for lane in range(32):
            g = _digits_of(lane, k.in_order, rext)
            digits = [g[d] * kk + m if d == i0 else g[d] for d in range(n)]
            if any(x >= b for x, b in zip(digits, k.box, strict=True)):
                continue
            w = _spread_address(k, digits, pitch, sh, strides, inner) // 4
            banks.setdefault(w % 32, set()).add(w)
        total += max((len(v) for v in banks.values()), default=0)
    banks = {}
    run = math.prod(k.box[: k.out_run])
    for lane in range(32):
        p = lane * kk
        rest = p // run
        digits = list(_digits_of(p % run, range(k.out_run), k.box).values())
        for d in range(k.out_run, n):
            digits.append(rest % k.box[d])
            rest //= k.box[d]
        w = _spread_address(k, digits, pitch, sh, strides, inner) // 4
        banks.setdefault(w % 32, set()).add(w)
    return total + max((len(v) for v in banks.values()), default=0)


def _packed_spread_vars(k: PackedKernel, dense: list[int]) -> dict[str, object]:
    """The spread kernel's index arithmetic (templates/packed/spread.cu.j2): a read step is
    a word of K elements along i0 (digit i0 counts words), a write step a word of the output's
    run (digit 0 counts words of the run's `run` elements, digits out_run.. the other box
    dims); shared addresses in bytes by `spread_layout`."""
    e, kk, i0, t = k.elem_bytes, k.block, k.in_order[0], k.out_run
    n = len(k.box)
    pitch, sh = spread_layout(k)
    strides = _spread_strides(k, pitch, sh)
    run = math.prod(k.box[:t])
    before_i0 = _spread_inner(k)

    def slot(d: int, x: str) -> str:
        if d < i0:
            return f"{x} * {before_i0[d]}u"
        if d == i0:
            return f"{x} * {pitch}u" + (f" + (({x}) >> {sh}) * 4u" if sh is not None else "")
        return f"{x} * {strides[d]}u"

    rext = _spread_read_ext(k)
    word_order = [0, *range(t, n)]
    wext = [run // kk, *[1] * (t - 1), *k.box[t:]]
    word_terms = [f"d0 * {kk * e}u"] + [slot(d, f"d{d}") for d in range(t, n)]
    if i0 < t:  # the run spans i0: a word's position in it split at i0's slabs
        pos = f"d0 * {kk}u"
        word_terms = [f"({pos}) % {dense[i0]}u * {e}u"]
        word_terms += [slot(d, f"(({pos}) / {dense[d]}u % {k.box[d]}u)") for d in range(i0, t)]
        word_terms += [slot(d, f"d{d}") for d in range(t, n)]
    # only the run's last dim can be cut (the others are whole dims of the problem)
    inner = math.prod(k.box[: t - 1])
    run_cut = k.checked[t - 1]
    out_inside = [f"d{d} < lim{d}" for d in range(t, n) if k.checked[d]]
    if run_cut and inner % kk == 0 and not k.realign_out:  # the cut run is whole words
        out_inside.append(f"d0 * {kk}u < lim{t - 1} * {inner}u")
        run_cut = False
    partial = k.funnel and (k.box[i0] % kk != 0 or k.checked[i0])
    nblocks = k.read_blocks
    nwords = k.volume // kk
    if k.realign_out:  # a write step is one of the aligned words a run covers
        wext = [k.run_words, *[1] * (t - 1), *k.box[t:]]
        nwords = k.run_words * (k.volume // run)
    batch = min(k.steps, WORDS_LOAD_BATCH * 2)
    return {
        "K": kk,
        "i0": i0,
        "pitch": pitch,
        "sh": sh,
        "run": run,
        # realigned: a word's funnel reads the shared word after its run's last
        "smem_bytes": _spread_bytes(k, pitch, sh) + (16 if k.realign_out else 0),
        "rext": rext,
        "wext": wext,
        "word_order": word_order,
        "partial": partial,
        "table_partial": k.funnel and k.box[i0] % kk != 0,
        "i0_lim": f"lim{i0}" if k.checked[i0] else f"{k.box[i0]}u",
        "nblocks": nblocks,
        "nwords": nwords,
        "rragged": k.steps * PACKED_THREADS != nblocks,
        "wragged": k.write_steps * PACKED_THREADS != nwords,
        "sbatch": batch,
        "sdsteps": -(-k.steps // batch) * batch,
        "s_in_offset": " + ".join(
            f"(off_t)(d{d}{f' * {kk}u' if d == i0 else ''}) * is{d}" for d in range(n)
        ),
        "s_slot": " + ".join(slot(d, f"d{d} * {kk}u" if d == i0 else f"d{d}") for d in range(n)),
        "s_in_inside": " && ".join(
            f"d{d} * {kk}u < lim{d}" if d == i0 else f"d{d} < lim{d}"
            for d in range(n)
            if k.checked[d]
        )
        or "true",
        "s_word": " + ".join(word_terms),
        "s_out_offset": " + ".join(
            [f"(off_t)(d0 * {kk}u)"] + [f"(off_t)d{d} * os{d}" for d in range(t, n)]
        ),
        "s_out_inside": " && ".join(out_inside) or "true",
        "run_cut": run_cut,
        "inner": inner,
        "unroll": min(k.write_steps, PACKED_UNROLL),
        # realigned: a run's first byte in shared memory and its offset in the output, and
        # its length in elements (the edge may cut its last dim)
        "r_slot": " + ".join(slot(d, f"d{d}") for d in range(t, n)) or "0u",
        "r_out_offset": " + ".join(f"(off_t)d{d} * os{d}" for d in range(t, n)) or "(off_t)0",
        "r_len": f"lim{t - 1} * {inner}u" if k.checked[t - 1] else f"{run}u",
    }


def _packed_word_vars(k: PackedKernel, dense: list[int]) -> dict[str, object]:
    """The words kernel's index arithmetic (templates/packed/words.cu.j2). A read step
    is a K x K block: digit 0 counts K rows of dim 0, digit i0 K elements of the input's
    innermost dim; a write step is a word of dim 0. Shared memory holds the box in output
    order in words (dense[j] / K words a step of dim j >= 1), one word skipped every 2**wshift
    words, wshift the power of two in a block's word step along i0 (mstep K apart: lanes
    stepping i0 store mstep * K words apart, an odd count of banks once skewed), at most 8 (the
    table's write slots step by a constant)."""
    kk, i0 = k.block, k.in_order[0]
    dims = range(len(k.box))
    scale = {0: kk, i0: kk}
    rext = [-(-b // kk) if d == i0 else b // scale.get(d, 1) for d, b in enumerate(k.box)]
    wext = [k.box[0] // kk, *k.box[1:]]
    words = [1] + [dense[d] // kk for d in dims if d]
    step = words[i0] * kk  # words between a block and the next along i0
    wshift = min((step & -step).bit_length() - 1, 8)
    nwords = k.volume // kk
    assert PACKED_THREADS % (1 << wshift) == 0 and all(dense[d] % kk == 0 for d in dims if d)
    # funnel: a block's last K elements along i0 may be fewer (the box's i0 extent, or where
    # the edge cuts it): only the words of those exist in shared memory
    partial = k.funnel and (k.box[i0] % kk != 0 or k.checked[i0])
    i0_lim = f"lim{i0}" if k.checked[i0] else f"{k.box[i0]}u"

    def inside(ext_scale: dict[int, int]) -> str:
        return (
            " && ".join(
                f"d{d} * {ext_scale.get(d, 1)}u < lim{d}" if d in ext_scale else f"d{d} < lim{d}"
                for d in dims
                if k.checked[d]
            )
            or "true"
        )

    def scaled(d: int, by: dict[int, int]) -> str:
        return f"d{d} * {by[d]}u" if d in by else f"d{d}"

    nblocks = k.read_blocks
    return {
        "K": kk,
        "i0": i0,
        "partial": partial,
        "table_partial": k.funnel and k.box[i0] % kk != 0,  # whole boxes' last i0 block part-filled
        "i0_lim": i0_lim,
        "rext": rext,
        "wext": wext,
        "mstep": words[i0],
        "wshift": wshift,
        "wsmem": (wsmem := (nwords - 1) + ((nwords - 1) >> wshift) + 1),
        "smem_bytes": 4 * wsmem,
        "nblocks": nblocks,
        "nwords": nwords,
        "rragged": k.steps * PACKED_THREADS != nblocks,
        "wragged": k.write_steps * PACKED_THREADS != nwords,
        "wwstride": PACKED_THREADS + (PACKED_THREADS >> wshift),
        "wbatch": (batch := min(k.steps, WORDS_LOAD_BATCH)),
        "wdsteps": -(-k.steps // batch) * batch,
        "w_shared": " + ".join(f"d{d} * {step if d == i0 else words[d]}u" for d in dims),
        "w_in_offset": " + ".join(f"(off_t)({scaled(d, scale)}) * is{d}" for d in dims),
        "w_out_offset": " + ".join(f"(off_t)({scaled(d, {0: kk})}) * os{d}" for d in dims),
        "w_in_inside": inside(scale),
        "w_out_inside": inside({0: kk}),
        "unroll": min(k.write_steps, PACKED_UNROLL),
    }


def render(config: KernelConfig) -> str:
    """The CUDA C source of one config's kernel; its `extern "C"` name is `config.kernel_name`."""
    if not isinstance(config, KernelConfig):
        raise TypeError(f"render() takes a KernelConfig, got {type(config).__name__}")
    return render_many([config])
