"""Rendering: KernelConfig -> CUDA C source through the Jinja2 templates in `templates/`.

Rendering needs neither a GPU nor pycuda. The template version (a hash of the template sources
and the config schema) is stored with every tuning result, so a result measured with older
kernels is never served for newer ones.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from pathlib import Path

import jinja2

from . import __version__
from .config import CONFIG_SCHEMA, KernelConfig

_WORD_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "u32", 8: "uint2", 16: "uint4"}
_DTYPES_BY_SIZE = {
    1: "int8, uint8, bool",
    2: "float16, bfloat16, int16, uint16",
    4: "float32, int32, uint32",
    8: "float64, int64, uint64, complex64",
    16: "complex128",
}


def template_dir() -> Path:
    """The templates: inside the installed package, or `templates/` of a source checkout."""
    packaged = Path(__file__).resolve().parent / "templates"
    if (packaged / "transpose.cu.j2").is_file():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / "templates"
    if (checkout / "transpose.cu.j2").is_file():
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


@functools.cache
def template_version() -> str:
    """Hash of the tuned kernels' template and the config schema: identifies what a stored
    result measured. (The measuring and peer kernels do not change what results mean.)"""
    h = hashlib.sha256(f"schema={CONFIG_SCHEMA}".encode())
    h.update((template_dir() / "transpose.cu.j2").read_bytes())
    return h.hexdigest()[:16]


def kernel_params(c: KernelConfig) -> dict[str, object]:
    """Everything the template needs about one config, derived here so the template only lays
    out code."""
    w = c.word_bytes
    a = c.chunk_bytes
    iw, ow = c.tile_n // c.vec, c.tile_m // c.vec
    rows = iw
    plane = rows * c.smem_pitch
    return {
        "name": c.kernel_name,
        "s": c.elem_bytes,
        "v": c.vec,
        "w": w,
        "ww": max(w // 4, 1),
        "e": max(c.elem_bytes // 4, 1),
        "narrow": w < 4,
        "tm": c.tile_m,
        "tn": c.tile_n,
        "pt": c.per_thread,
        "threads": c.threads,
        "word_t": _WORD_TYPES[w],
        "chunk_t": _WORD_TYPES[a],
        "a": a,
        "cw": max(a // 4, 1),
        "planes": c.planes,
        "rows": rows,
        "pitch": c.smem_pitch,
        "plane": plane,
        "smem_chunks": c.planes * plane,
        "smem": c.smem_bytes,
        "iw": iw,
        "ow": ow,
        "lstep": c.threads // iw,
        "ostep": c.threads // ow,
        "layout": c.layout,
        "pad": c.pad,
        "swz_mask": min(ow, 128 // a) - 1,
        "swz_rows": max(1, 128 // (ow * a)),
        "raster": c.raster,
        "cache": c.cache,
        "conjugate": c.conjugate,
        "realign": c.realign,
        "elem_t": _WORD_TYPES[c.elem_bytes],
        "dtypes": _DTYPES_BY_SIZE[c.elem_bytes],
    }


def flat_params(c: KernelConfig) -> dict[str, object]:
    """What templates/flat.cu.j2 needs about one flat config."""
    return {
        "name": c.kernel_name,
        "s": c.elem_bytes,
        "tl": c.tile_m,
        "tw": c.tile_n,
        "threads": c.threads,
        "unroll": c.per_thread,
        "words": c.smem_bytes // 4,
        "cache": c.cache,
        "conjugate": c.conjugate,
        "elem_t": _WORD_TYPES[c.elem_bytes],
        "dtypes": _DTYPES_BY_SIZE[c.elem_bytes],
    }


def render_many(configs: Iterable[KernelConfig]) -> str:
    """One translation unit holding a kernel per distinct kernel name (compiled in a single nvcc
    call); configs that differ only in launch parameters (`persistent`) share their kernel.
    Each access strategy has its own template: tiled kernels (transpose.cu.j2), flat kernels
    for skinny matrices (flat.cu.j2)."""
    unique = list({c.kernel_name: c for c in configs}.values())
    tiled = [c for c in unique if not c.flat]
    flat = [c for c in unique if c.flat]
    parts = []
    if tiled or not flat:
        parts.append(
            _environment().get_template("transpose.cu.j2").render(
                kernels=[kernel_params(c) for c in tiled],
                version=__version__,
                template_hash=template_version(),
            )
        )
    if flat:
        parts.append(
            _environment().get_template("flat.cu.j2").render(
                kernels=[flat_params(c) for c in flat], version=__version__
            )
        )
    return "\n".join(parts)


_ELEMENT_TYPES = [(1, "unsigned char"), (2, "unsigned short"), (4, "u32"), (8, "uint2"), (16, "uint4")]


def render_support() -> str:
    """Measurement helpers: random fill, naive reference transpose, mismatch count."""
    return _environment().get_template("support.cu.j2").render(
        element_types=_ELEMENT_TYPES, version=__version__
    )


def render_seed() -> str:
    """The seed documents' kernel for every element size (a peer in `autotranspose bench`)."""
    source = _environment().get_template("seed.cu.j2").render(
        element_types=_ELEMENT_TYPES, version=__version__
    )
    return "typedef unsigned int u32;\n" + source


def render(config: KernelConfig) -> str:
    """The CUDA C source of one config's kernel; its `extern "C"` name is `config.kernel_name`."""
    if not isinstance(config, KernelConfig):
        raise TypeError(f"render() takes a KernelConfig, got {type(config).__name__}")
    return render_many([config])
