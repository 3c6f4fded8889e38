"""What dispatch serves, frozen: for a fixed list and a seeded random set of transposes,
permutes and cast-transposes on an H200 and an H100 (shipped results, no database), every
decision (the untuned default, the served config, whether it is raced, the first call's
candidates, a permute's race, a cast's default and race list) equals
tests/data/policy_snapshot.json. Regenerate it only for an intended change of what is served:
``PYTHONPATH=. python3 tests/test_policy.py --write``."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from autotranspose.dispatch import cast as cast_dispatch, lookup, policy
from autotranspose.kernels.config import KernelConfig
from autotranspose.kernels.shapes import call_vec, shape_class
from autotranspose.kinds.cast import PAIRS
from autotranspose.plans.cast import plan_cast
from autotranspose.plans.layout import contiguous_strides
from autotranspose.plans.permute import TRANSPOSE, plan_permute
from autotranspose.runtime.device import DeviceInfo

SNAPSHOT = Path(__file__).parent / "data" / "policy_snapshot.json"
H200 = DeviceInfo("NVIDIA H200", (9, 0), multiprocessors=132)
H100 = DeviceInfo("NVIDIA H100 80GB HBM3", (9, 0), multiprocessors=132)
DEVICES = {"H200": H200, "H100": H100}
SIZES = {"int8": 1, "fp8": 1, "bf16": 2, "fp16": 2, "fp32": 4, "int32": 4, "fp64": 8}
SIZES |= {"c64": 8, "c128": 16}
SIDES = (1, 2, 3, 5, 7, 8, 13, 14, 31, 32, 64, 97, 128, 197, 256, 509, 1000, 1024, 4096)
SIDES += (7919, 65536, 100003, 1048576, 2000003)


# --- the cases -----------------------------------------------------------------------------------
def transpose_cases() -> list[tuple[str, int, int, int, int, int, int]]:
    """(dtype, batch, m, n, row pad, pointer offset in elements, conjugate)."""
    fixed = [
        ("fp32", 1, 8192, 8192, 0, 0, 0),
        ("int8", 1, 3, 40000003, 0, 0, 0),
        ("int8", 1, 40000003, 3, 0, 0, 0),
        ("bf16", 1, 190, 600000, 0, 0, 0),
        ("fp16", 1, 134, 777624, 0, 0, 0),
        ("fp32", 1, 140, 1843254, 0, 0, 0),
        ("fp32", 1, 2266934, 4, 0, 0, 0),
        ("c128", 1, 32, 1048576, 0, 0, 0),
        ("c128", 1, 21, 977100, 0, 0, 1),
        ("c64", 1, 24, 2000003, 0, 0, 0),
        ("fp64", 1, 21, 7536398, 0, 0, 0),
        ("fp16", 1, 2, 261136885, 0, 0, 0),
        ("int8", 1, 5, 16000001, 0, 0, 0),
        ("fp16", 1, 8000001, 5, 0, 0, 0),
        ("int8", 1, 37, 1000000, 0, 0, 0),
        ("fp8", 16, 197, 197, 0, 0, 0),
        ("bf16", 64, 14, 14, 0, 1, 0),
        ("fp32", 1, 471466, 129, 0, 0, 0),
        ("int8", 1, 1048576, 32, 0, 0, 0),
        ("fp32", 1, 100, 1000, 3, 0, 0),
        ("fp32", 1, 1000, 9, 5, 0, 0),
        ("int8", 1, 7, 1000003, 1, 3, 0),
        ("c128", 1, 9832845, 1, 0, 0, 0),
    ]
    rng = random.Random(20261129)
    drawn = []
    for _ in range(110):
        dtype = rng.choice(list(SIZES))
        m, n = rng.choice(SIDES), rng.choice(SIDES)
        if rng.random() < 0.4:  # an odd side near the drawn one
            m = max(1, m + rng.randrange(-3, 4))
        while m * n > 4 << 30:
            n //= 7
        batch = rng.choice((1, 1, 1, 2, 8, 96)) if m * n < 1 << 24 else 1
        pad = rng.choice((0, 0, 0, 1, 8))
        offset = rng.choice((0, 0, 0, 1, 2, 3))
        conj = dtype in ("c64", "c128") and rng.random() < 0.3
        drawn.append((dtype, batch, m, max(n, 1), pad, offset, int(conj)))
    return fixed + drawn


def permute_cases() -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    """(dtype, shape, axes) of 3 to 6 dims, contiguous."""
    fixed = [
        ("bf16", (8, 4096, 2, 128), (0, 2, 1, 3)),  # a K/V head swap
        ("int32", (4, 225440, 72), (0, 2, 1)),
        ("int8", (64, 3, 224, 224), (0, 2, 3, 1)),
        ("fp32", (32, 197, 12, 64), (0, 2, 1, 3)),
        ("c128", (3, 5, 7, 9, 11), (4, 3, 2, 1, 0)),
        ("fp16", (2, 3, 4, 5, 6, 7), (5, 0, 4, 1, 3, 2)),
    ]
    rng = random.Random(20261818)
    drawn = []
    small = (1, 2, 3, 4, 5, 7, 8, 12, 14, 16, 31, 64, 197, 256)
    for _ in range(60):
        ndim = rng.randint(3, 6)
        dtype = rng.choice(list(SIZES))
        shape = [rng.choice(small) for _ in range(ndim)]
        while math.prod(shape) < (1 << 21) and rng.random() < 0.8:
            shape[rng.randrange(ndim)] *= rng.choice((2, 3, 7))
        axes = list(range(ndim))
        while axes == sorted(axes):
            rng.shuffle(axes)
        drawn.append((dtype, tuple(shape), tuple(axes)))
    return fixed + drawn


def cast_cases() -> list[tuple[str, tuple[int, ...], tuple[int, ...], int, int]]:
    """(pair, shape, axes, both, output pointer offset in elements)."""
    shapes = [(8192, 8192), (15143, 5745), (8016, 18625), (3, 4097), (197, 197)]
    shapes += [(4, 1023, 777), (2, 3, 129, 65), (1, 16), (100003, 7)]
    rng = random.Random(53)
    out = []
    for code in PAIRS:
        for shape in rng.sample(shapes, 4):
            axes = (*range(len(shape) - 2), len(shape) - 1, len(shape) - 2)
            if rng.random() < 0.2:  # a permute of the leading axes too, or none at all
                axes = tuple(reversed(range(len(shape))))
            out.append((code, shape, axes, rng.randint(0, 1), rng.choice((0, 0, 1))))
    return out


# --- what dispatch decides for each ---------------------------------------------------------------
def _key(c: KernelConfig | None) -> str | None:
    return None if c is None else c.key


def transpose_answer(device: DeviceInfo, case: tuple[Any, ...]) -> dict[str, Any]:
    dtype, b, m, n, pad, offset, conj = case
    e, conjugate = SIZES[dtype], bool(conj)
    ld_in, ld_out = n + pad, m + pad
    ptr = offset * e
    vec = call_vec(e, b, m, n, ld_in, ld_out, m * ld_in, n * ld_out, (ptr, 0))
    cls = shape_class(b, m, n, vec)
    choice = lookup.choose(device, e, cls, store=None, conjugate=conjugate)
    cfg = policy.served(choice, e, m, n, ld_in, ld_out, vec, conjugate)

    def runnable(c: KernelConfig) -> bool:
        return policy.runs(c, device.limits, m, n, vec, ld_in, ld_out)

    near = lookup.neighbours(device, e, cls, store=None)
    portfolio = policy.candidates(cfg, near, e, m, n, vec, conjugate, runnable)
    return {
        "copy": not conjugate and policy.copies(m, n, ld_in, ld_out),
        "source": choice.source,
        "chosen": choice.config.key,
        "served": cfg.key,
        "raced": policy.raced(choice, cfg, cls, m, n),
        "default": policy.default_choice(e, cls, device.limits, conjugate).config.key,
        "few_rows": _key(policy.few_rows_default(e, m, n, vec, conjugate)),
        "candidates": [c.key for c in portfolio],
    }


def permute_answer(device: DeviceInfo, case: tuple[Any, ...]) -> dict[str, Any]:
    dtype, shape, axes = case
    plan = plan_permute(shape, axes, SIZES[dtype])
    got: dict[str, Any] = {
        "race": [p.describe() for p in (*plan.passes[:1], *policy.permute_race(plan))],
    }
    if plan.passes and plan.passes[0].kind == TRANSPOSE:
        got["kernel"] = lookup.permute_kernel(plan, device, store=None).kernel
    return got


def cast_answer(device: DeviceInfo, case: tuple[Any, ...]) -> dict[str, Any]:
    code, shape, axes, both, offset = case
    src, dst = PAIRS[code]
    want = tuple(shape[a] for a in axes)
    x_strides = contiguous_strides(shape)
    plan = plan_cast(shape, axes, x_strides, contiguous_strides(want), x_strides if both else None)
    if plan.two_pass:
        return {"two_pass": True}
    y_ptr = offset * dst.size
    aligned = policy.cast_aligned_out(plan, dst, y_ptr)
    if not plan.launches[0].transpose:
        return {"served": policy.cast_default(src, dst, aligned).key}
    cls = cast_dispatch.cast_class(plan, src, 0)
    choice = lookup.cast_choice(device, code, cls, both=bool(both), aligned_out=aligned, store=None)
    race = policy.cast_race(choice.config, src, dst, device.limits)
    return {
        "source": choice.source,
        "served": choice.config.key,
        "raced": policy.is_guess(choice, cls),
        "race": [c.key for c in race],
    }


def answers() -> dict[str, Any]:
    lookup.clear_cache()
    out: dict[str, Any] = {}
    for dev_name, device in DEVICES.items():
        for case in transpose_cases():
            out[f"{dev_name}/transpose/{case}"] = transpose_answer(device, case)
        for case in permute_cases():
            out[f"{dev_name}/permute/{case}"] = permute_answer(device, case)
        for case in cast_cases():
            out[f"{dev_name}/cast/{case}"] = cast_answer(device, case)
    lookup.clear_cache()
    return out


@pytest.fixture
def real_shipped(monkeypatch):
    """The shipped tuning files of the checkout, no database."""
    monkeypatch.setenv("AUTOTRANSPOSE_DB", "sqlite:////nonexistent/none.db")
    yield


def test_every_decision_is_the_frozen_one(real_shipped):
    want = json.loads(SNAPSHOT.read_text())
    got = json.loads(json.dumps(answers()))
    assert sorted(got) == sorted(want)
    differ = [k for k in want if got[k] != want[k]]
    assert not differ, f"{len(differ)} decisions changed, first {differ[0]}: " + (
        f"{want[differ[0]]} -> {got[differ[0]]}"
    )


def test_the_cases_cover_what_the_policy_tells_apart():
    """The frozen set holds every dtype size, skinny and few-row calls, unaligned rows,
    conjugates, 3- to 6-dim permutes and every cast pair."""
    cases = transpose_cases()
    assert {SIZES[c[0]] for c in cases} == {1, 2, 4, 8, 16}
    assert any(c[6] for c in cases) and any(c[5] for c in cases) and any(c[4] for c in cases)
    assert any(min(c[2], c[3]) <= 8 for c in cases) and len(cases) >= 120
    assert {len(c[1]) for c in permute_cases()} == {3, 4, 5, 6}
    assert {c[0] for c in cast_cases()} == set(PAIRS)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import os

    os.environ["AUTOTRANSPOSE_DB"] = "sqlite:////nonexistent/none.db"
    SNAPSHOT.write_text(json.dumps(answers(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")
