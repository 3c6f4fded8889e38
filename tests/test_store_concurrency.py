"""Several processes writing one database: nothing is lost and best is the true maximum."""

from __future__ import annotations

import multiprocessing
import queue

import pytest
from store_data import H100, write_results

from autotranspose.shapes import ShapeClass
from autotranspose.store import Store

pytest_plugins = ("store_fixtures",)
pytestmark = pytest.mark.usefixtures("isolated_home")

WORKERS = 3
PER_WORKER = 80
CLASSES = 3


def _run_workers(url: str, seeds: list[int]) -> list[tuple[str, str, str, float]]:
    ctx = multiprocessing.get_context("spawn")  # no engine or lock inherited through fork
    start = ctx.Barrier(len(seeds))  # every writer ready (imports done, store open) first
    out = ctx.Queue()
    procs = [
        ctx.Process(target=write_results, args=(url, seed, PER_WORKER, CLASSES, start, out))
        for seed in seeds
    ]
    for p in procs:
        p.start()
    sent = []
    try:
        for _ in procs:
            sent.extend(out.get(timeout=120))
    except queue.Empty:
        pytest.fail("a writer process gave no result within 120 s")
    finally:
        for p in procs:
            p.join(timeout=30)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return sent


@pytest.mark.parametrize("fresh", [True, False], ids=["racing-first-open", "existing-db"])
def test_concurrent_writers_lose_nothing(db_url, rng, fresh):
    if not fresh:
        Store.open(db_url).close()  # else the writers also race to create the schema
    seeds = [int(s) for s in rng.integers(0, 2**31, size=WORKERS)]
    sent = _run_workers(db_url, seeds)
    assert len(sent) == WORKERS * PER_WORKER

    with Store.open(db_url) as store:
        with store.engine.connect() as conn:
            stored = conn.exec_driver_sql("SELECT COUNT(*) FROM at_measurements").scalar()
            runs = conn.exec_driver_sql(
                "SELECT COUNT(*) FROM at_runs WHERE status = 'done'"
            ).scalar()
        assert stored == len(sent) and runs == WORKERS
        for cls_text in {s[0] for s in sent}:
            correct = [s for s in sent if s[0] == cls_text and s[2] == "ok"]
            best = store.best(H100.name, 4, ShapeClass.parse(cls_text))
            if not correct:
                assert best is None
                continue
            top = max(correct, key=lambda s: s[3])
            assert best is not None
            assert best.gbps == pytest.approx(top[3]) and best.config.key == top[1]
