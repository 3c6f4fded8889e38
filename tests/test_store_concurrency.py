"""Several processes writing one database: nothing is lost and best is the true maximum; an
import holds the write lock briefly and writes a file's entries all or none."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import threading
import time

import numpy as np
import pytest
import sqlalchemy as sa
from _spawned import answers
from store_data import H100, import_file, tuning_doc, write_results

from autotranspose.kernels.config import KernelConfig
from autotranspose.kernels.shapes import ShapeClass
from autotranspose.store import Store, ingest, textio
from autotranspose.store.measurement import Measurement

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
    return [row for rows in answers(procs, out, "a writer process") for row in rows]


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


# --- a large import beside a recorder -----------------------------------------------------------
IMPORTED = 20_000  # entries: about 20 s of per-entry statements, holding the write lock
PATIENCE_S = 5  # how long the recorder waits for a lock (SQLite busy timeout, PostgreSQL's)


def _impatient(store: Store) -> None:
    """Make `store` give up on a lock after PATIENCE_S (the default is to wait 30 s or more),
    so that an import holding the lock longer shows as a failed record."""

    @sa.event.listens_for(store.engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        cursor = dbapi_connection.cursor()
        if store.engine.dialect.name == "sqlite":
            cursor.execute(f"PRAGMA busy_timeout = {PATIENCE_S * 1000}")
        else:
            cursor.execute(f"SET lock_timeout = '{PATIENCE_S}s'")
            dbapi_connection.commit()
        cursor.close()

    store.engine.dispose()  # connections made from now on wait at most PATIENCE_S


def test_a_recorder_beside_a_large_import_succeeds(db_url, rng):
    """`tune` recording while a large file is imported: every record succeeds, even one that
    waits for the import's lock, and each class ends with the faster of the two."""
    doc = tuning_doc(rng, IMPORTED)
    tf = textio.parse(doc)
    target = doc["entries"][: IMPORTED // 2]  # the recorder writes into the file's classes
    errors: list[BaseException] = []
    recorded: list[tuple[tuple[int, str], float, float, float]] = []  # (key, gbps, began, ended)
    importing = threading.Event()
    recording = threading.Event()  # the recorder's first record is stored: it is up to speed
    done = threading.Event()
    speeds = np.random.default_rng(int(rng.integers(2**31)))  # the recorder's own generator

    def recorder() -> None:
        try:
            with Store.open(db_url) as store:
                _impatient(store)
                importing.wait(60)
                i = 0
                while not done.is_set():
                    e = target[i % len(target)]
                    i += 1
                    config = KernelConfig.from_dict(e["config"])
                    gbps = float(speeds.uniform(100, 3000))
                    began = time.monotonic()
                    store.record(
                        None,
                        H100,
                        e["dtype"],
                        e["elem_bytes"],
                        tuple(e["shape"]),
                        ShapeClass.parse(e["shape_class"]),
                        config,
                        Measurement("ok", gbps, e["copy_gbps"], 1.0),
                    )
                    recorded.append(
                        ((e["elem_bytes"], e["shape_class"]), gbps, began, time.monotonic())
                    )
                    recording.set()
                    time.sleep(0.01)  # the tuner measures between records
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    with Store.open(db_url) as store:
        thread = threading.Thread(target=recorder)
        thread.start()
        importing.set()
        # the import starts once the recorder records: its first record once came after a whole
        # import (about a second here), so no record overlapped and the test failed by timing
        assert recording.wait(60), f"the recorder never recorded: {errors[:1]!r}"
        time.sleep(0.05)
        started = time.monotonic()
        try:
            assert textio.import_into(store, tf) == IMPORTED
        finally:
            finished = time.monotonic()
            time.sleep(0.2)
            done.set()
            thread.join(120)
        assert not errors, f"a record failed beside the import: {errors[0]!r}"
        # a record overlapped the import: it began before the import ended and ended after it
        # began (one that waited for the import's lock ends after the import)
        assert any(b <= finished and t >= started for _, _, b, t in recorded), (
            "no record overlapped"
        )
        best = {(e["elem_bytes"], e["shape_class"]): e["gbps"] for e in doc["entries"]}
        for key, gbps, _, _ in recorded:
            best[key] = max(best[key], gbps)
        stored = {(e.elem_bytes, str(e.shape_class)): e.gbps for e in store.entries()}
        assert stored == pytest.approx(best)


@pytest.mark.parametrize("attempt", range(3))
def test_a_killed_import_leaves_all_or_nothing(db_url, rng, tmp_path, attempt):
    """kill -9 at a random moment of an import's writing (which takes a fraction of a second
    here): the file's entries are all there or none."""
    count = 5000
    path = tmp_path / "big.json"
    path.write_text(json.dumps(tuning_doc(rng, count)))
    Store.open(db_url).close()
    ctx = multiprocessing.get_context("spawn")
    writing = ctx.Event()
    proc = ctx.Process(target=import_file, args=(db_url, str(path), writing))
    proc.start()
    try:
        assert writing.wait(120), "the importing process never began writing"
        time.sleep(float(rng.uniform(0, 0.2)))
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.join(30)
    with Store.open(db_url) as store:
        with store.engine.connect() as conn:
            counts = {
                table: conn.exec_driver_sql(f"SELECT COUNT(*) FROM {table}").scalar()
                for table in ("at_measurements", "at_best", "at_runs")
            }
    assert counts in (
        {"at_measurements": 0, "at_best": 0, "at_runs": 0},
        {"at_measurements": count, "at_best": count, "at_runs": 1},
    ), counts


@pytest.mark.postgres
@pytest.mark.parametrize(
    "recorded_faster", [True, False], ids=["recorded-faster", "imported-faster"]
)
def test_an_import_meets_a_best_written_meanwhile(pg_url, rng, monkeypatch, recorded_faster):
    """PostgreSQL lets a recorder write a new key between the import's read of the bests and
    its insert: the import then offers its entry against that row, and the faster one stays."""
    doc = tuning_doc(rng, 50)
    tf = textio.parse(doc)
    target = tf.entries[int(rng.integers(len(tf.entries)))]
    gbps = target.gbps * (1.5 if recorded_faster else 0.5)
    real = ingest.insert_bests
    with Store.open(pg_url) as store, Store.open(pg_url) as recorder:
        run = recorder.begin_run(H100, {})  # the device row exists: record() will not wait on it
        shape = target.shape
        recorder.record(
            run,
            H100,
            target.dtype,
            target.elem_bytes,
            shape,
            target.shape_class,
            target.config,
            Measurement("ok", 1.0, target.copy_gbps, 1.0),
        )

        def meanwhile(conn, device_id, new):
            assert any(e.shape_class == target.shape_class for e, _ in new)
            recorder.record(
                run,
                H100,
                target.dtype,
                target.elem_bytes,
                shape,
                target.shape_class,
                target.config,
                Measurement("ok", gbps, target.copy_gbps, 1.0),
            )
            return real(conn, device_id, new)

        with store.engine.connect() as conn:  # the first record made the key: start afresh
            conn.exec_driver_sql("DELETE FROM at_best")
            conn.commit()
        monkeypatch.setattr(ingest, "insert_bests", meanwhile)
        assert textio.import_into(store, tf) == 50
        best = store.best(H100.name, target.elem_bytes, target.shape_class)
        assert best.gbps == pytest.approx(max(gbps, target.gbps))
        assert len(store.entries()) == 50


def test_a_lock_held_elsewhere_is_a_busy_error_after_the_engines_wait(db_url):
    """A store opened with a busy timeout waits that long for another connection's lock (a
    write lock on SQLite, a row another transaction is inserting on PostgreSQL), then raises
    StoreBusyError, the StoreError a first call handles without waiting longer."""
    from autotranspose.errors import StoreBusyError
    from autotranspose.store import engine as store_engine

    Store.open(db_url).close()
    other = sa.create_engine(db_url if "://" in db_url else f"sqlite:///{db_url}")
    with other.connect() as conn, Store.open(db_url, busy_timeout_s=0.3) as store:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")  # pysqlite's own BEGIN is deferred
        else:
            conn.begin()
        conn.exec_driver_sql(
            "INSERT INTO at_claims (study, key, owner, created_at) "
            "VALUES ('s', 'k', 'other', CURRENT_TIMESTAMP)"
        )
        started = time.monotonic()
        with pytest.raises(StoreBusyError, match="cannot write") as caught:
            store.claim("s", "k", "me")
        took = time.monotonic() - started
        assert store_engine.busy(caught.value.__cause__)
        assert 0.25 < took < 10, took  # the store's 0.3 s, not the engine's default 30 s
        conn.rollback()
        assert store.claim("s", "k", "me")  # free again: claimed at once
    other.dispose()


def test_a_first_open_waits_while_another_process_creates_the_file(tmp_path):
    """SQLite refuses the switch to WAL at once ("database is locked", no busy handler) while
    another connection holds the write lock on a file not yet in WAL mode: the moment another
    process's first open writes the new file. Opening then waits for it, as every other
    statement does, and the database comes out in WAL mode with our schema."""
    path = tmp_path / "tuning.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # the empty file, its write lock held
    release = threading.Timer(0.3, other.execute, args=("COMMIT",))
    release.start()
    try:
        with Store.open(path) as store:
            with store.engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert store.entries() == []
    finally:
        release.join()
        other.close()
