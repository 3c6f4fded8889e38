"""Shared fixtures. GPU tests carry the `gpu` marker and skip cleanly without a GPU."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# JAX takes 75% of the GPU's memory at its first use unless told otherwise: the GPU tests of
# PyTorch, CuPy and the kernels share the process (and the card) with the JAX tests.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# The run's own directory (made once, by the controller of a pytest-xdist run): every place
# autotranspose keeps state between processes points into it (`_isolate`).
RUN_DIR = "AUTOTRANSPOSE_TEST_RUN_DIR"
_made_here: list[Path] = []
# what a user's shell may set that changes what a call does (first-call measurement, keeping
# its winners, the native launcher): docs/serving.md
_SWITCHES = (
    "AUTOTRANSPOSE_FIRST_CALL",
    "AUTOTRANSPOSE_FIRST_CALL_STORE",
    "AUTOTRANSPOSE_NATIVE_LAUNCH",
)


def _isolate() -> None:
    """Point everything autotranspose reads or writes outside a test's tmp_path into the run's
    own directory, so that no test reads or writes the user's state: the default tuning
    database and its first-call winners (``$AUTOTRANSPOSE_DB``, and the per-user data dir
    ``platformdirs`` gives, `store.urls.default_path`: ``$XDG_DATA_HOME``), the compiled
    launcher, DLPack and JAX handler libraries (`_native.cache_dir`: the per-user cache dir,
    ``$XDG_CACHE_HOME``), pycuda's cubin cache (``$PYCUDA_CACHE_DIR``), and sources that
    failed to compile (``$AUTOTRANSPOSE_FAILED_DIR``). The user's switches of what a call
    does are dropped too (`_SWITCHES`: tests set what they test).

    Done once per run, before any test and before pytest-xdist starts its workers: they
    inherit the environment, so they share the directory, and kernels compiled by one serve
    all for the whole run. The database there is not created: a test that wants one makes
    its own in tmp_path. Set AUTOTRANSPOSE_TEST_RUN_DIR to a directory to keep compiled
    kernels between runs (it is then not removed at the end)."""
    given = os.environ.get(RUN_DIR)
    for name in _SWITCHES:
        os.environ.pop(name, None)
    root = Path(given) if given else Path(tempfile.mkdtemp(prefix="autotranspose-tests-"))
    if not given:
        _made_here.append(root)
    os.environ[RUN_DIR] = str(root)
    os.environ["XDG_DATA_HOME"] = str(root / "data")
    os.environ["XDG_CACHE_HOME"] = str(root / "cache")
    os.environ["AUTOTRANSPOSE_DB"] = str(root / "data" / "autotranspose" / "tuning.db")
    os.environ["AUTOTRANSPOSE_FAILED_DIR"] = str(root / "failed")
    cubins = root / "cache" / "pycuda"  # pycuda reads this before its per-user cache dir
    cubins.mkdir(parents=True, exist_ok=True)  # and, given it, makes none
    os.environ["PYCUDA_CACHE_DIR"] = str(cubins)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput") or "PYTEST_XDIST_WORKER" in os.environ


def pytest_configure(config: pytest.Config) -> None:
    if not _is_worker(config):  # a worker has its controller's environment already
        _isolate()


def pytest_unconfigure(config: pytest.Config) -> None:
    while _made_here:
        shutil.rmtree(_made_here.pop(), ignore_errors=True)


def _gpu_reason() -> str | None:
    try:
        from autotranspose.runtime.compiler import driver

        driver()
    except Exception as exc:  # no pycuda, no driver, no device
        return f"no usable CUDA GPU: {exc}"
    return None


_REASON: list[str | None] = []


def _shard(config: pytest.Config, items: list[pytest.Item]) -> None:
    """AUTOTRANSPOSE_TEST_SHARD=k/N keeps every N-th test from the k-th: N processes split a
    suite that one device call cannot run serially (`bash dev/device.sh tests`)."""
    spec = os.environ.get("AUTOTRANSPOSE_TEST_SHARD")
    if not spec:
        return
    try:
        k, n = (int(p) for p in spec.split("/"))
        assert 0 <= k < n
    except (ValueError, AssertionError):
        raise pytest.UsageError(
            f"AUTOTRANSPOSE_TEST_SHARD={spec!r}: write k/N with 0 <= k < N, e.g. 0/3"
        ) from None
    kept = items[k::n]
    config.hook.pytest_deselected(items=[i for j, i in enumerate(items) if j % n != k])
    items[:] = kept


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _shard(config, items)
    gpu_items = [i for i in items if i.get_closest_marker("gpu")]
    if not gpu_items:
        return
    if not _REASON:
        _REASON.append(_gpu_reason())
    if _REASON[0]:
        skip = pytest.mark.skip(reason=_REASON[0])
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture
def rng(request: pytest.FixtureRequest):
    """A generator seeded freshly per test run (printed on failure through the test id)."""
    import numpy as np

    return np.random.default_rng()


@pytest.fixture(scope="session")
def pycuda_primary():
    """pycuda's own allocations (gpuarray.to_gpu) need a pycuda context on the thread's
    stack: push the primary one, as a GPUArray user sharing memory with CuPy or PyTorch
    would (pycuda.autoprimaryctx pops it again at exit)."""
    import pycuda.autoprimaryctx

    return pycuda.autoprimaryctx.context


@pytest.fixture
def quiet_optuna() -> None:
    """Optuna's log at WARNING: the tuner tests run many studies and trials."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture
def db(tmp_path):
    """A new SQLite tuning database, open (the tuner tests'; test_cli has its own, a URL)."""
    from autotranspose.store import Store

    with Store.open(tmp_path / "tuning.db") as s:
        yield s


@pytest.fixture
def no_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans keep their batched transpose or row copy whatever it costs (no gather pass): for
    the tests of what those passes are, on shapes small enough that a gather would take them."""
    from autotranspose.plans import permute as plan

    monkeypatch.setattr(plan, "GATHER_MAX_LAUNCHES", float("inf"))
    monkeypatch.setattr(plan, "GATHER_MIN_LAUNCH_BYTES", 0)
    monkeypatch.setattr(plan, "GATHER_MIN_SIDE", 0)


@pytest.fixture
def nothing_tuned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No database and no shipped results: every class is one nobody tuned, so its first
    call measures (first-call measurement on, whatever the environment); the choices, the
    prepared calls and what earlier first calls timed forgotten before and after."""
    import autotranspose as at
    from autotranspose.dispatch import firstcall, inplace as programs, lookup

    monkeypatch.setenv("AUTOTRANSPOSE_DB", str(tmp_path / "absent.db"))
    monkeypatch.setattr(lookup, "tuning_db_dir", lambda: None)
    monkeypatch.delenv(firstcall.ENV_VAR, raising=False)
    at.clear_caches()
    firstcall.history.clear()
    programs.history.clear()
    yield
    firstcall.set_enabled(None)
    at.clear_caches()


@pytest.fixture
def own_pass() -> Iterator[None]:
    """permute() runs each plan's own pass, not the fastest of its alternatives (first-call
    measurement off): for the tests of one kind of pass, on arrays large enough to have
    alternatives. Cached steps and launches are dropped before and after."""
    from autotranspose.dispatch import firstcall, picker as dispatch

    firstcall.set_enabled(False)
    dispatch.clear()
    yield
    firstcall.set_enabled(None)
    dispatch.clear()


@pytest.fixture
def no_packed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Plans that would run one packed launch run one gather launch instead: for the tests
    of the gather, on shapes where a box would take them. permute()'s cached plans and steps
    are dropped before and after, so no call sees a plan made the other way."""
    from autotranspose.dispatch import picker as dispatch
    from autotranspose.plans import permute as plan

    monkeypatch.setattr(plan, "packed_box", lambda *args: None)
    monkeypatch.setattr(plan, "vector_box", lambda *args: None)
    dispatch.clear()
    yield
    dispatch.clear()


@pytest.fixture(scope="module")
def torch():
    """PyTorch with a CUDA device, else the test is skipped (the GPU tests' peer and
    framework)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return torch
