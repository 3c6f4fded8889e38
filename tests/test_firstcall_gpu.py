"""The first call of a class nobody tuned measures a small portfolio on its own buffers, once,
and later calls of the class get the winner (see autotranspose._firstcall)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import autotranspose as at
from autotranspose import (
    _dispatch as dispatch,
    _firstcall as firstcall,
    _lookup as lookup,
    _winners as winners,
)
from autotranspose._compiler import device_state
from autotranspose._config import max_vec
from autotranspose._shapes import shape_class
from autotranspose.store import Store

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def nothing_tuned(monkeypatch, tmp_path):
    """No database and no shipped results: every class is one nobody tuned."""
    monkeypatch.setenv("AUTOTRANSPOSE_DB", str(tmp_path / "absent.db"))
    monkeypatch.setattr(lookup, "tuning_db_dir", lambda: None)
    monkeypatch.delenv(firstcall.ENV_VAR, raising=False)
    lookup.clear_cache()
    dispatch.clear()
    firstcall.history.clear()
    yield
    firstcall.set_enabled(None)
    lookup.clear_cache()
    dispatch.clear()


def _cupy():
    return pytest.importorskip("cupy")


def _odd_shape(rng) -> tuple[int, int]:
    return int(rng.integers(500, 1500)) * 2 + 1, int(rng.integers(500, 1500)) * 2 + 1


def _measured(shape, elem_bytes=4):
    m, n = shape
    cls = shape_class(1, m, n, max_vec(elem_bytes, n, m, n, m))
    return [h for h in firstcall.history if h[2] == cls], cls


def test_an_untuned_class_is_measured_once_then_served_its_winner(rng):
    cupy = _cupy()
    shape = _odd_shape(rng)
    a = rng.standard_normal(shape).astype(np.float32)
    y = at.transpose(cupy.asarray(a))
    assert np.array_equal(cupy.asnumpy(y), a.T)
    (found,), cls = _measured(shape)
    outcome = found[3]
    timed = {c: t for c, t in outcome.seconds.items() if t is not None}
    assert len(outcome.seconds) >= 2 and outcome.best in timed
    # How good the pick is, is a timing: the benchmarks measure it (dev/packed_check.py,
    # bench), not this test (a 10% bound across rounds of ~10 us launches failed on an H200:
    # 10.4 against 8.4 us, rounds apart).
    assert 0 < outcome.gpu_s
    choice = lookup.choose(device_state(0).info, 4, cls)
    assert (choice.source, choice.config) == ("measured", outcome.best)
    # a later call of the class, other data and other buffers: no second measurement
    b = rng.standard_normal(shape).astype(np.float32)
    out = cupy.empty(shape[::-1], cupy.float32)
    at.transpose(cupy.asarray(b), out)
    assert np.array_equal(cupy.asnumpy(out), b.T)
    assert len(_measured(shape)[0]) == 1


@pytest.mark.parametrize("how", ["api", "env"])
def test_switched_off_serves_lookups_guess(rng, monkeypatch, how):
    cupy = _cupy()
    if how == "api":
        firstcall.set_enabled(False)
    else:
        monkeypatch.setenv(firstcall.ENV_VAR, "0")
    shape = _odd_shape(rng)
    a = rng.standard_normal(shape).astype(np.float32)
    assert np.array_equal(cupy.asnumpy(at.transpose(cupy.asarray(a))), a.T)
    measured, cls = _measured(shape)
    assert measured == []
    assert lookup.choose(device_state(0).info, 4, cls).source == "default"


def test_threads_hitting_a_new_class_measure_it_once(rng):
    cupy = _cupy()
    shape = _odd_shape(rng)
    data = [rng.standard_normal(shape).astype(np.float32) for _ in range(8)]
    start = threading.Barrier(8)
    bad: list[str] = []

    def work(i: int) -> None:
        with cupy.cuda.Device(0):
            x = cupy.asarray(data[i])
            start.wait()
            for _ in range(4):
                if not np.array_equal(cupy.asnumpy(at.transpose(x)), data[i].T):
                    bad.append(f"thread {i}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []
    assert len(_measured(shape)[0]) == 1


def test_no_measurement_while_the_stream_is_captured(rng):
    torch = pytest.importorskip("torch")
    shape = _odd_shape(rng)
    x = torch.empty(shape, device="cuda")
    out = torch.empty(shape[::-1], device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        at.transpose(x, out)
    assert _measured(shape)[0] == []  # capture forbids the timing's synchronisation
    x.copy_(torch.as_tensor(rng.standard_normal(shape).astype(np.float32)))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, x.t())
    # outside capture, a new signature of the class (a pitched view) measures it
    wide = torch.empty(shape[0], shape[1] + 16, device="cuda")
    view = wide[:, : shape[1]]
    view.copy_(x)
    y = at.transpose(view)
    torch.cuda.synchronize()
    assert torch.equal(y, x.t()) and len(_measured(shape)[0]) == 1


_FIRST_CALL = textwrap.dedent("""
    import json, sys
    import cupy, numpy as np
    import autotranspose as at
    from autotranspose import _firstcall as firstcall, _lookup as lookup
    from autotranspose._compiler import device_state
    from autotranspose._config import max_vec
    from autotranspose._shapes import shape_class
    lookup.tuning_db_dir = lambda: None  # nothing shipped: a class nobody tuned
    m, n = int(sys.argv[1]), int(sys.argv[2])
    a = np.random.default_rng().standard_normal((m, n)).astype(np.float32)
    assert np.array_equal(cupy.asnumpy(at.transpose(cupy.asarray(a))), a.T)
    cls = shape_class(1, m, n, max_vec(4, n, m, n, m))
    choice = lookup.choose(device_state(0).info, 4, cls)
    print(json.dumps({"measured": len(firstcall.history), "source": choice.source,
                      "config": choice.config.key}))
""")


def test_a_winner_is_stored_and_the_next_process_does_not_measure(rng, tmp_path):
    """The first call of a class in one process measures it and stores the winner in the
    default database (`winners`); a second process serves that winner without measuring."""
    _cupy()
    db = tmp_path / "tuning.db"
    Store.open(db).close()  # the default database exists and is ours: winners are kept
    m, n = _odd_shape(rng)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTRANSPOSE_")}
    root = str(Path(__file__).resolve().parents[1])  # ahead of the caller's path (wheels there)
    env.update(
        AUTOTRANSPOSE_DB=str(db),
        PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
    )
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", _FIRST_CALL, str(m), str(n)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert (first["measured"], first["source"]) == (1, "measured"), first
    assert (second["measured"], second["source"]) == (0, "measured"), second
    assert second["config"] == first["config"]
    with Store.open(db, readonly=True) as s:
        (entry,) = s.entries()
    assert (entry.source, entry.config.key, entry.dtype) == ("measured", first["config"], "float32")
    assert entry.shape == (1, m, n) and entry.gbps > 0


def test_first_calls_recorded_into_a_database_keep_every_prepared_signature(
    rng, tmp_path, monkeypatch
):
    """With a tuning database to record into (a user who ran `tune`), each new class's first
    call records its winner there. That moves no lookup generation: every signature seen
    before keeps its fast path and its config, so the full path runs once per signature
    however many classes are measured after it."""
    cupy = _cupy()
    path = tmp_path / "tuning.db"
    Store.open(path).close()
    monkeypatch.setenv("AUTOTRANSPOSE_DB", f"sqlite:///{path}")
    lookup.clear_cache()
    dispatch.clear()
    full = []
    launch_for = dispatch.launch_for
    monkeypatch.setattr(dispatch, "launch_for", lambda *a: full.append(1) or launch_for(*a))
    generation = lookup.generation
    # three classes apart by their sides (odd: rows at odd offsets, no shipped class)
    shapes = [
        (int(rng.integers(150, 250)) * 2 + 1, int(rng.integers(300, 500)) * 2 + 1),
        (int(rng.integers(550, 950)) * 2 + 1, int(rng.integers(150, 250)) * 2 + 1),
        (int(rng.integers(1250, 1900)) * 2 + 1, int(rng.integers(1250, 1900)) * 2 + 1),
    ]
    launches = {}
    for round_ in range(3):
        for shape in shapes:
            a = rng.standard_normal(shape).astype(np.float32)
            y = at.transpose(cupy.asarray(a))
            assert np.array_equal(cupy.asnumpy(y), a.T), (round_, shape)
        assert len(full) == len(shapes), round_  # each signature's full path once
        hits = {k: h for k, h in dispatch.caches.hits.items() if k[0] == "cupy"}
        assert len(hits) == len(shapes), round_
        now = dict(dispatch.caches.launches)
        assert len(now) == len(shapes) and all(launches.get(k, v) is v for k, v in now.items())
        launches = now
    assert lookup.generation == generation
    assert firstcall.history  # classes were measured (and recorded) after others were served
    info = device_state(0).info
    with Store.open(path, readonly=True) as store:
        for _, _, cls, outcome in firstcall.history:
            best = store.best(info.name, 4, cls)
            assert best is not None and best.source == "measured", cls
            assert best.config == outcome.best
    served = {launch.config for launch in launches.values()}
    assert {h[3].best for h in firstcall.history} <= served
    winners.forget()  # the writer of this test's database closed
