"""What the kernel kinds decide, as one JSON-able snapshot: the search spaces (every config, in
order), the rendered source of a sample of every kind's configs, their derived shape (threads,
shared memory, tiles, grid), the defaults and serving rules, the neighbourhood steps and the
validation messages of random field combinations.

tests/data/kinds_snapshot.json holds it as computed before the kinds moved to
`autotranspose/kinds/` (the code of one class with kind flags); tests/test_kinds.py computes
it again and compares, so a refactoring of the kinds keeps every kernel byte for byte.
Regenerate (only for an intended change of a kernel or a space):

    python3 -m tests.kinds_snapshot > tests/data/kinds_snapshot.json
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import sys
from collections.abc import Iterable
from typing import Any

from autotranspose.dispatch import policy
from autotranspose.errors import ConfigError
from autotranspose.kernels import codegen, config as C

SIZES = (1, 2, 4, 8, 16)
DTYPES = {1: "int8", 2: "float16", 4: "float32", 8: "float64", 16: "complex128"}
# (conjugate, max_vector, short_side) for config_space: aligned, unaligned (the any-offset
# kinds), skinny (flat, flat byte-permute) and narrow (direct narrow tiles)
SPACE_CASES = (
    (False, None, None),
    (False, 1, None),
    (False, 2, None),
    (False, None, 4),
    (False, 1, 64),
    (True, None, None),
    (True, 1, 16),
)
SHAPES = (
    (1, 1),
    (3, 40000003),
    (7081411, 20),
    (4099, 6007),
    (64, 64),
    (255, 100003),
    (100003, 31),
    (2, 261136885),
    (11000003, 6),
    (20, 7081411),
    (8192, 8192),
)
SAMPLE_EVERY = 97  # a space's every 97th config is rendered (all of each kind's defaults too)


def _digest(lines: Iterable[str]) -> tuple[int, str]:
    h, n = hashlib.sha256(), 0
    for line in lines:
        h.update(line.encode() + b"\n")
        n += 1
    return n, h.hexdigest()[:24]


def _key(c: Any) -> Any:
    return None if c is None else c.key


def _call(f: Any, *args: Any) -> Any:
    """f(*args) as keys (a config, a list of them, None), or the ConfigError it raises."""
    try:
        got = f(*args)
    except ConfigError as e:
        return f"ConfigError: {e}"
    return [c.key for c in got] if isinstance(got, list) else _key(got)


def space_cases() -> list[tuple[int, bool, int | None, int | None]]:
    return [
        (s, conj, mv, ss) for s in SIZES for conj, mv, ss in SPACE_CASES if not conj or s in (8, 16)
    ]


@functools.cache
def space(s: int, conj: bool, mv: int | None, ss: int | None) -> tuple[C.KernelConfig, ...]:
    return tuple(
        C.config_space(
            ("complex64" if conj and s == 8 else DTYPES[s]),
            conjugate=conj,
            max_vector=mv,
            short_side=ss,
        )
    )


def space_snapshot(s: int, conj: bool, mv: int | None, ss: int | None) -> dict[str, Any]:
    configs = space(s, conj, mv, ss)
    n, h = _digest(c.key for c in configs)
    return {"count": n, "keys": h}


def space_name(s: int, conj: bool, mv: int | None, ss: int | None) -> str:
    return f"s{s}_conj{int(conj)}_mv{mv}_ss{ss}"


def defaults() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s in SIZES:
        for conj in (False, True):
            out[f"staged_default/{s}/{conj}"] = _call(C.staged_default, s, conj)
            out[f"prmt_default/{s}/{conj}"] = _call(C.prmt_default, s, conj)
            out[f"prmt_alternative/{s}/{conj}"] = _call(C.prmt_alternative, s, conj)
            for mv in (16, 8, 4, 2, 1):
                out[f"default_config/{s}/{mv}/{conj}"] = _call(C.default_config, s, mv, conj)
            for side in (1, 2, 3, 5, 8, 16, 17, 33, 64, 100, 200, 256, 300):
                out[f"flat_default/{s}/{side}/{conj}"] = _call(C.flat_default, s, side, conj)
            for m, n in SHAPES:
                out[f"direct_default/{s}/{m}x{n}/{conj}"] = _call(C.direct_default, s, m, n, conj)
                out[f"narrow_configs/{s}/{m}x{n}/{conj}"] = _call(C.narrow_configs, s, m, n, conj)
                out[f"narrow_default/{s}/{m}x{n}/{conj}"] = _call(C.narrow_default, s, m, n, conj)
                for vec in (1, 2, 4, 8, 16):
                    out[f"few_rows_default/{s}/{m}x{n}/{vec}/{conj}"] = _call(
                        policy.few_rows_default, s, m, n, vec, conj
                    )
                    out[f"few_cols_default/{s}/{m}x{n}/{vec}/{conj}"] = _call(
                        C.few_cols_default, s, m, n, vec, conj
                    )
        out[f"seed_config/{s}"] = _call(C.seed_config, s)
        for side in (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 20, 21, 33, 64, 100, 128, 129, 200, 256, 257):
            out[f"tall_default/{s}/{side}"] = _call(C.tall_default, s, side)
            for exact in (True, False):
                out[f"wide_default/{s}/{side}/{exact}"] = _call(C.wide_default, s, side, exact)
        for m, n in SHAPES:
            out[f"tall_rows/{s}/{m}x{n}"] = C.tall_rows(s, m, n)
            out[f"wide_rows/{s}/{m}x{n}"] = C.wide_rows(s, m, n)
        for vec in (1, 2, 4, 8, 16):
            out[f"rows_at_any_offset/{s}/{vec}"] = C.rows_at_any_offset(s, vec)
    return out


def samples() -> list[C.KernelConfig]:
    """Every kind's defaults, and every SAMPLE_EVERY-th config of each space case."""
    found: dict[str, C.KernelConfig] = {}
    for case in space_cases():
        for c in space(*case)[::SAMPLE_EVERY]:
            found.setdefault(c.key, c)
    for s in SIZES:
        for side in (4, 16, 20, 64, 100, 200):
            for c in (
                C.tall_default(s, side),
                C.wide_default(s, side),
                C.wide_default(s, side, False),
                C.flat_default(s, side),
            ):
                if c is not None:
                    found.setdefault(c.key, c)
        for m, n in SHAPES:
            for c in [
                C.direct_default(s, m, n),
                *C.narrow_configs(s, m, n),
                policy.few_rows_default(s, m, n, 2),
                C.few_cols_default(s, m, n, 4),
            ]:
                if c is not None:
                    found.setdefault(c.key, c)
        for c in (
            C.staged_default(s),
            C.prmt_default(s),
            C.prmt_alternative(s),
            C.default_config(s),
        ):
            if c is not None:
                found.setdefault(c.key, c)
    return list(found.values())


def config_facts(c: C.KernelConfig) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "dict": c.to_dict(),
        "name": c.kernel_name,
        "threads": c.threads,
        "smem": c.smem_bytes,
        "registers": c.registers,
        "any_offset": c.any_offset,
        "source": hashlib.sha256(codegen.kernel_source(c).encode()).hexdigest()[:24],
        "render": hashlib.sha256(codegen.render(c).encode()).hexdigest()[:24],
        "version": codegen.kernel_version(c),
        "neighbours": _digest(x.key for x in C.neighbours(c))[1],
        "pairs": _digest(x.key for x in C.pair_steps(c))[1],
        "cap_steps": list(C.cap_steps(c)),
        "for_rows": [C.for_rows(c, m).key for m in (3, 4, 5, 21, 64)],
    }
    shapes = []
    for m, n in SHAPES:
        ok = c.applies(m, n)
        shapes.append(
            [ok, list(c.tiles(m, n)) if ok else None, list(c.grid(m, n, 3, 132)) if ok else None]
        )
    facts["shapes"] = shapes
    return facts


def facts_digest(c: C.KernelConfig) -> str:
    """`config_facts` as one hash (tests/test_kinds.py shows the facts of a config that differs)."""
    return hashlib.sha256(json.dumps(config_facts(c), sort_keys=True).encode()).hexdigest()[:24]


FIELDS = {
    "elem_bytes": (1, 2, 4, 8, 16, 3),
    "tile_m": (2, 16, 32, 64, 128, 256, 512, 1024, 2048, 48),
    "tile_n": (2, 4, 8, 16, 32, 64, 128, 256, 512),
    "vec": (1, 2, 4, 8, 16),
    "per_thread": (1, 2, 4, 8, 16, 3),
    "pad": (0, 1, 2, 5),
    "layout": ("pad", "swizzle"),
    "raster": ("row", "col"),
    "cache": ("default", "stream"),
    "conjugate": (False, True),
    "persistent": (0, 1, 8),
    "realign": (False, True),
    "flat": (False, True),
    "staged": (False, True),
    "prmt": (False, True),
    "wide": (False, True),
    "min_blocks": (0, 2, 4, 1, 33),
    "ordered": (False, True),
    "direct": (False, True),
}
RANDOM_FIELDS = 6000


def validation() -> tuple[int, str]:
    """Random field combinations, each kind flag set about half the time: the config's key or
    its validation message."""
    rng = random.Random(1234)
    out = []
    for _ in range(RANDOM_FIELDS):
        fields = {name: rng.choice(values) for name, values in FIELDS.items()}
        try:
            out.append(C.KernelConfig.from_dict(fields).key)
        except ConfigError as e:
            out.append(str(e))
    return _digest(out)


def snapshot() -> dict[str, Any]:
    return {
        "spaces": {space_name(*case): space_snapshot(*case) for case in space_cases()},
        "defaults": defaults(),
        "configs": {c.key: facts_digest(c) for c in samples()},
        "validation": list(validation()),
        "render_many": hashlib.sha256(codegen.render_many(samples()).encode()).hexdigest()[:24],
        "render_outer": hashlib.sha256(codegen.render_outer(samples()).encode()).hexdigest()[:24],
    }


if __name__ == "__main__":
    json.dump(snapshot(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
