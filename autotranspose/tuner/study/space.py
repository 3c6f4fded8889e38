"""The search space of one study: its valid configs and the map between Optuna's parameters and
them; the class a case's results go under; the study's name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from ...dispatch import policy
from ...errors import ShapeError, TuningError
from ...kernels.codegen import template_version
from ...kernels.config import (
    OPTIONAL_FIELDS,
    KernelConfig,
    config_space,
    neighbours,
    pair_steps,
)
from ...kernels.shapes import Layout, ShapeClass, call_vec, flat_fits, shape_class
from ...kinds import inplace as inplace_kind
from ...runtime.device import DeviceInfo

# Every field of KernelConfig that varies within a study is one parameter. Integer fields are
# searched by their rank among the study's choices (TPE then sees 64 between 32 and 128, and
# there are no gaps where a size is invalid for this element type); other fields are
# categorical. Layout and padding form one categorical parameter, since padding means nothing
# with the swizzle. The choices come from the study's valid configs, so every trial has the
# same distributions, as Optuna requires.
_STUDY_FIELDS = ("elem_bytes", "conjugate")  # fixed by the study itself


def _field_values(config: KernelConfig) -> dict[str, Any]:
    """The config's parameters: its stored fields (OPTIONAL_FIELDS at their default left
    out, so a space without them keeps its parameters and study), layout and pad as one; an
    in-place config's parameters (written as one key) each a field of its own, so that the
    sampler ranks their sizes."""
    values = config.to_dict()
    for name in _STUDY_FIELDS:
        values.pop(name)
    values["smem"] = f"{values.pop('layout')}{values.pop('pad')}"
    if config.kind == inplace_kind.NAME:
        del values[inplace_kind.NAME]
        for name in inplace_kind.field_names():
            values[f"{inplace_kind.NAME}_{name}"] = getattr(config.params, name)
    return values


def _filled(values: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """`values` with the optional fields of `fields` it lacks at their default: a tall
    and a wide config that differ only in `wide` are two points of a space, not one."""
    return {f: values[f] if f in values else OPTIONAL_FIELDS[f] for f in fields}


class SearchSpace:
    """The valid configs of one study and the map between Optuna parameters and them.

    A parameter combination that is not a valid config (a tile too small for the vector, too
    many threads, ...) is repaired to the nearest valid config: fewest rank steps, then
    fewest changed choices, ties broken by the space's own order. Nothing invalid is launched.

    The tuner also repairs away from configs already tried on the shape (or being tried by
    another trial): Optuna's samplers may propose a point again, and TPE ignores failed
    trials, so it would propose a failing config over and over. Each trial thus measures a
    config nobody has measured, the nearest one to where the sampler wants to look.
    """

    def __init__(self, configs: Iterable[KernelConfig]) -> None:
        self.configs: tuple[KernelConfig, ...] = tuple(dict.fromkeys(configs))
        if not self.configs:
            raise TuningError("the search space is empty: no config fits this device and shape")
        rows = [_field_values(c) for c in self.configs]
        self._fields = tuple(dict.fromkeys(f for r in rows for f in r))
        rows = [_filled(r, self._fields) for r in rows]
        self._choices: dict[str, list[Any]] = {}
        self.distributions: dict[str, BaseDistribution] = {}
        self._ordinal: list[bool] = []
        for f in self._fields:
            choices = sorted({r[f] for r in rows}, key=lambda v: (str(type(v)), v))
            self._choices[f] = choices
            ordinal = all(type(v) is int for v in choices)
            self._ordinal.append(ordinal)
            if ordinal:
                self.distributions[f"{f}_rank"] = IntDistribution(0, len(choices) - 1)
            else:
                self.distributions[f] = CategoricalDistribution(choices)
        self._names = tuple(self.distributions)
        self._index = {f: {v: i for i, v in enumerate(ch)} for f, ch in self._choices.items()}
        points = [self._point(r) for r in rows]
        self._by_point = {p: c for p, c in zip(points, self.configs, strict=True)}
        self._by_key = {c.key: c for c in self.configs}
        self._position = {c.key: i for i, c in enumerate(self.configs)}
        self._matrix = np.array(points, dtype=float)
        self._is_choice = ~np.array(self._ordinal)

    def _point(self, values: Mapping[str, Any]) -> tuple[int, ...]:
        return tuple(self._index[f][values[f]] for f in self._fields)

    def __len__(self) -> int:
        return len(self.configs)

    def __contains__(self, config: object) -> bool:
        return isinstance(config, KernelConfig) and self._by_key.get(config.key) == config

    def by_key(self, key: str) -> KernelConfig | None:
        return self._by_key.get(key)

    def digest(self) -> str:
        """Identifies the parameters and their choices: a study cannot change them."""
        text = repr(sorted((n, repr(d)) for n, d in self.distributions.items()))
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    def params_of(self, config: KernelConfig) -> dict[str, Any]:
        """The Optuna parameters of a config of this space (for enqueueing it)."""
        if config not in self:
            raise TuningError(f"config {config.key} is not in this study's search space")
        point = self._point(_filled(_field_values(config), self._fields))
        return {
            name: (i if ordinal else self._choices[f][i])
            for name, f, ordinal, i in zip(
                self._names, self._fields, self._ordinal, point, strict=True
            )
        }

    def neighbours(self, config: KernelConfig) -> list[KernelConfig]:
        """The configs of this space one step from `config` (`config.neighbours`)."""
        return [c for c in neighbours(config) if c in self]

    def pair_steps(self, config: KernelConfig) -> list[KernelConfig]:
        """The configs of this space a step away in two size fields (`config.pair_steps`)."""
        return [c for c in pair_steps(config) if c in self]

    def config_for(self, params: Mapping[str, Any], taken: Collection[str] = ()) -> KernelConfig:
        """The config of a trial's parameters: exact if valid and not `taken` (keys of configs
        tried already), else the nearest valid one that is not taken (if any is left)."""
        point = tuple(
            int(params[name]) if ordinal else self._index[f][params[name]]
            for name, f, ordinal in zip(self._names, self._fields, self._ordinal, strict=True)
        )
        exact = self._by_point.get(point)
        if exact is not None and exact.key not in taken:
            return exact
        diff = np.abs(self._matrix - np.array(point, dtype=float))
        steps = np.where(self._is_choice, 0.0, diff).sum(axis=1)
        changed = np.where(self._is_choice, diff > 0, False).sum(axis=1)
        excluded = [self._position[k] for k in taken if k in self._position]
        if len(excluded) < len(self.configs):
            steps[excluded] = np.inf
        best = np.lexsort((np.arange(len(self.configs)), changed, steps))[0]
        return self.configs[int(best)]


def study_name(
    device: DeviceInfo,
    elem_bytes: int,
    cls: ShapeClass,
    space: SearchSpace,
    conjugate: bool = False,
    layout: Layout | None = None,
) -> str:
    """The Optuna study of one (device, element size, conjugate, shape class), and for a
    strided layout (a permute's pass) of that layout too: its measurements differ from a
    contiguous call's, so the sampler must not mix them (its results still compete for the
    class's best).

    Its last part names the kernel templates and the search space: trials measured with
    other kernels would mislead the sampler (and the store no longer serves their results),
    and Optuna cannot change a study's parameters.
    """
    conj = ":conj" if conjugate else ""
    strides = f":layout={layout.text}" if layout is not None else ""
    version = hashlib.sha256(f"{template_version()}:{space.digest()}".encode()).hexdigest()[:10]
    return f"autotranspose:{device.slug}:s{elem_bytes}{conj}:{cls}{strides}:{version}"


def check_shape(shape: Sequence[int]) -> tuple[int, int, int]:
    """A case's (batch, m, n); an (m, n) is one matrix. Anything else is a ShapeError."""
    dims = tuple(shape)
    if len(dims) == 2:
        dims = (1, *dims)
    if len(dims) != 3 or not all(type(d) is int and d >= 1 for d in dims):
        raise ShapeError(
            f"shape must be (batch, m, n) or (m, n) of positive ints, got {tuple(shape)!r}"
        )
    return dims  # type: ignore[return-value]


def tuned_class(
    elem_bytes: int, dims: tuple[int, int, int], layout: Layout | None, max_vector: int | None
) -> ShapeClass:
    """The class a tune's results go under: the widest vector its sizes and strides allow,
    as transpose() and permute() derive it for their calls, capped by `max_vector`."""
    b, m, n = dims
    vec = call_vec(elem_bytes, b, m, n, *(layout or Layout.contiguous(dims)))
    if max_vector is not None:
        if type(max_vector) is not int or max_vector not in (1, 2, 4, 8, 16):
            raise TuningError(
                f"max_vector must be 1, 2, 4, 8 or 16 (elements), got {max_vector!r:.40}"
            )
        vec = min(vec, max_vector)
    return shape_class(b, m, n, vec)


def study_configs(
    dtype: str,
    device: DeviceInfo,
    cls: ShapeClass,
    conjugate: bool,
    dims: tuple[int, int, int],
    layout: Layout | None,
) -> list[KernelConfig]:
    """The study's search space: the class's configs, less the flat ones whose rows the
    layout's strides break (a strided call never runs them: `_dispatch.transpose.flat_fits_call`);
    register transposes rendered for the tuned shape's own side, of its own direction
    (`policy.for_call`: the class's bound is not the call's side; their results serve the class's
    other sides the same way)."""
    _, m, n = dims
    configs = config_space(
        dtype, device.limits, conjugate=conjugate, max_vector=cls.vec, short_side=min(cls.m, cls.n)
    )
    configs = [policy.for_call(c, m, n) if c.kind == "regt" else c for c in configs]
    configs = list(dict.fromkeys(c for c in configs if c.kind != "regt" or c.applies(m, n)))
    if layout is None:
        return configs
    return [
        c
        for c in configs
        if not c.spans_short_side or flat_fits(c, m, n, layout.ld_in, layout.ld_out)
    ]
