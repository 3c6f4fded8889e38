"""Kernel kinds as policies: one module per kind of transpose kernel, each a `Kind`
(kinds/base.py) holding that kind's own parameters (`Kind.Params`), validation, shared memory
and threads, tiles and grid, template parameters, search space, defaults, serving rules and
written form. A config.KernelConfig is a kind's name, that kind's parameters and the fields
every kind shares; codegen renders a config with its kind's template and parameters.

Adding a kind: its module here (a `Kind` subclass with its `Params` and its instance), its
template folder templates/<name>/ (the skeleton its `template` names and its pieces;
template_version covers it unasked), and one `register` line below. The registration order is
the order kernels of several kinds are rendered in one file.

Kinds import nothing of CUDA and nothing of config (config builds on them): they build configs
through the constructor config hands them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..errors import ConfigError
from . import cast, direct, flat, inplace, prmt, regt, staged, tiled
from .base import Kind

_REGISTRY: dict[str, Kind] = {}
# every kind flag of the written form at its value when not written, kept as kinds register
# (read by every config's to_dict and from_dict)
_FLAG_DEFAULTS: dict[str, Any] = {}


def register(kind: Kind) -> Kind:
    """Add a kind under its name (once). No two kinds may read one written form."""
    if kind.name in _REGISTRY:
        raise ValueError(f"a kernel kind named {kind.name!r} is already registered")
    for other in _REGISTRY.values():
        if other.reads(kind.written(kind.Params())) is not None:
            raise ValueError(f"kinds {other.name!r} and {kind.name!r} read the same flags")
    _REGISTRY[kind.name] = kind
    for flag, value in kind.flag_defaults().items():
        _FLAG_DEFAULTS.setdefault(flag, value)
    return kind


register(tiled.KIND)
register(flat.KIND)
register(staged.KIND)
register(prmt.KIND)
register(direct.KIND)
register(regt.KIND)
register(cast.KIND)
register(inplace.KIND)


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


def flag_defaults() -> Mapping[str, Any]:
    """Every kind flag of the written form, at its value when not written (read-only)."""
    return _FLAG_VIEW


_FLAG_VIEW: Mapping[str, Any] = MappingProxyType(_FLAG_DEFAULTS)


def read(flags: Mapping[str, Any]) -> tuple[Kind, Any]:
    """The kind and its parameters that a written form's kind flags spell (`flags`: every
    kind flag it holds, at any value), or ConfigError naming what the kinds accept."""
    defaults = flag_defaults()
    unknown = sorted(set(flags) - set(defaults))
    if unknown:
        raise ConfigError(f"unknown kind flag(s) {unknown}; the kind flags are {sorted(defaults)}")
    set_ = {k: v for k, v in flags.items() if v != defaults[k]}
    for kind in _REGISTRY.values():
        params = kind.reads(set_)
        if params is not None:
            return kind, params
    spelled = ", ".join(f"{k}={v!r}" for k, v in set_.items())
    raise ConfigError(
        f"kind flags {spelled} spell no kernel kind; a config is one of: "
        + "; ".join(k.spelled() for k in _REGISTRY.values())
    )
