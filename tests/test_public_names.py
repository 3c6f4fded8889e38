"""The public calls are plain attributes of the package once first used: the hot path of
`at.cast_transpose(...)` or `at.transpose(...)` is not a module `__getattr__` (an import
statement on every call) each time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CALLS = ("transpose", "permute", "transpose_", "cast_transpose")


@pytest.mark.parametrize("first", CALLS)
def test_a_public_call_is_a_plain_attribute_after_its_first_use(first):
    code = f"""
import autotranspose as at
assert not any(name in vars(at) for name in {CALLS!r}), "loaded before first use"
fn = getattr(at, {first!r})
for name in {CALLS!r}:
    assert name in vars(at), name
    assert getattr(at, name) is vars(at)[name]
assert at.{first} is fn
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
