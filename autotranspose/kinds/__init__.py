"""Kernel kinds as policies: one module per kind of transpose kernel, each a `Kind`
(kinds/base.py) holding that kind's validation, shared memory and threads, tiles and grid,
template parameters, search space, defaults and serving rules. config.KernelConfig holds the
fields every kind shares and asks its kind (`kind_of`) for the rest; codegen renders a
config with its kind's template and parameters.

Adding a kind: its module here (a `Kind` subclass and its instance), its template folder
templates/<name>/ (the skeleton its `template` names and its pieces; template_version covers
it unasked), its flag field on KernelConfig, and one `register` line below. The registration
order is the order kernels of several kinds are rendered in one file; where several kind
flags are set, the kind of the highest `precedence` is the config's (flat=True with prmt=True
is prmt).

Kinds import nothing of CUDA and nothing of config (config builds on them): they build configs
through the constructor config hands them.
"""

from __future__ import annotations

from typing import Any

from . import cast, direct, flat, prmt, regt, staged, tiled
from .base import Kind

_REGISTRY: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Add a kind under its name (once)."""
    if kind.name in _REGISTRY:
        raise ValueError(f"a kernel kind named {kind.name!r} is already registered")
    _REGISTRY[kind.name] = kind
    return kind


register(tiled.KIND)
register(flat.KIND)
register(staged.KIND)
register(prmt.KIND)
register(direct.KIND)
register(regt.KIND)
register(cast.KIND)


def names() -> tuple[str, ...]:
    """The registered kinds' names, in registration order."""
    return tuple(_REGISTRY)


def all_kinds() -> tuple[Kind, ...]:
    return tuple(_REGISTRY.values())


def get(name: str) -> Kind:
    """The kind registered as `name`."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no kernel kind {name!r}; the kinds are {list(_REGISTRY)}") from None


def kind_of(c: Any) -> Kind:
    """A config's kind, from its kind flags: of the kinds whose flag is set (the tiled kind
    has none: always), the one of the highest precedence."""
    return max(
        (k for k in _REGISTRY.values() if k.flag is None or getattr(c, k.flag)),
        key=lambda k: k.precedence,
    )
