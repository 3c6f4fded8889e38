"""The public entry points route each array to its path: PyTorch tensors and JAX tracers to
their integrations (once those frameworks are imported), everything else to the kernels."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import autotranspose as at
from autotranspose import _api as entry, errors


def test_the_package_exports_the_entry_points():
    assert at.transpose is entry.transpose
    assert at.permute is entry.permute


@pytest.fixture
def fresh_entry(monkeypatch):
    """entry's framework state as in a process that has not met PyTorch or JAX yet."""
    for name in ("_torch_ops", "_jax_ops"):
        monkeypatch.setattr(entry, name, None)
    monkeypatch.setattr(entry, "_TorchTensor", ())
    monkeypatch.setattr(entry, "_JaxTracer", ())
    return entry


def test_a_framework_without_the_needed_api_warns_once_and_calls_run_eagerly(
    fresh_entry, monkeypatch
):
    fake = types.ModuleType("torch")  # imported, but no torch.library: the integration fails
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.delitem(sys.modules, "autotranspose.frameworks.torch_ops", raising=False)
    with pytest.warns(RuntimeWarning, match="PyTorch integration could not be loaded"):
        assert fresh_entry._load_frameworks(object()) is False
    assert fresh_entry._torch_ops is False
    assert fresh_entry._load_frameworks(object()) is False  # no second warning, no retry


def test_arrays_of_no_framework_take_the_kernels_path(fresh_entry, monkeypatch):
    seen = []
    monkeypatch.setattr(
        entry.permuter, "permute", lambda *a, **k: seen.append(("permute", a)) or "p"
    )
    monkeypatch.setattr(
        entry.api, "transpose", lambda *a, **k: seen.append(("transpose", a)) or "t"
    )
    monkeypatch.setattr(entry, "_load_frameworks", lambda x: False)
    x = np.zeros((2, 3))
    assert at.permute(x, (1, 0)) == "p" and at.transpose(x) == "t"
    assert [s[0] for s in seen] == ["permute", "transpose"]


def test_traced_jax_calls_refuse_what_xla_decides(fresh_entry, monkeypatch):
    class Tracer:
        pass

    calls = []
    ops = types.SimpleNamespace(
        permute=lambda x, axes: calls.append(("permute", axes)) or "traced",
        transpose=lambda x, conjugate=False: calls.append(("transpose", conjugate)) or "traced",
    )
    monkeypatch.setattr(entry, "_jax_ops", ops)
    monkeypatch.setattr(entry, "_JaxTracer", Tracer)
    t = Tracer()
    assert at.permute(t, (1, 0)) == "traced" and at.transpose(t, conjugate=True) == "traced"
    assert calls == [("permute", (1, 0)), ("transpose", True)]
    with pytest.raises(errors.OutputError, match="immutable"):
        at.permute(t, (1, 0), out=object())
    with pytest.raises(errors.InputTypeError, match=r"stream= cannot be used inside jax\.jit"):
        at.transpose(t, stream=1)
    with pytest.raises(errors.InputTypeError, match="config= cannot be used"):
        at.transpose(t, config=at.KernelConfig(4))


def test_the_process_switches_reach_their_modules(monkeypatch):
    from autotranspose.dispatch import firstcall, winners

    monkeypatch.delenv(firstcall.ENV_VAR, raising=False)
    try:
        at.set_first_call_measurement(False)
        at.set_keep_winners(False)
        assert not firstcall.enabled() and not winners.enabled()
    finally:
        at.set_first_call_measurement(None)
        at.set_keep_winners(None)
    assert firstcall.enabled()
    at.clear_caches()  # nothing prepared yet: no error
