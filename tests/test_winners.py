"""First-call winners kept in the tuning database (`autotranspose.dispatch.winners`), without a GPU.

The measurement is a stand-in that logs each run (`_winners.logging_measure`); everything else
is real: SQLite files and PostgreSQL databases, real configs, real processes racing for a
class. The GPU end to end check is tests/test_firstcall_gpu.py.
"""

from __future__ import annotations

import hashlib
import io
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from _child import prepared
from _spawned import answers
from _synthetic import DEVICE as SYNTHETIC, SyntheticObjective
from _winners import CALL, CLS, DEVICE, GUESS, SHAPE, WINNER, logging_measure, measured
from store_data import ok
from test_store_open import _make_read_only, foreign_db, read_only_dir, snapshot  # noqa: F401

from autotranspose import cli
from autotranspose.dispatch import lookup, policy, winners
from autotranspose.errors import StoreError
from autotranspose.kernels import codegen
from autotranspose.kernels.config import default_config, staged_default
from autotranspose.kernels.shapes import max_vec, shape_class
from autotranspose.kinds import inplace as inplace_kind
from autotranspose.plans.dtypes import ELEMENT_SIZES, word_type
from autotranspose.store import Store, resolve_url, sqlite_path, textio, upgrade, writes
from autotranspose.store.models import Claim
from autotranspose.tuner.study import tune

pytest_plugins = ("store_fixtures",)
pytestmark = pytest.mark.usefixtures("isolated_home")

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """No shipped results, no cached choices or writers, persistence on (the default)."""
    monkeypatch.setattr(lookup, "tuning_db_dir", lambda: None)
    monkeypatch.setattr(lookup, "_stores", {})
    monkeypatch.setattr(lookup, "_warned", set())
    monkeypatch.delenv(winners.ENV_VAR, raising=False)
    winners.forget()
    lookup.clear_cache()
    yield
    winners.forget()
    winners.set_enabled(None)
    lookup.clear_cache()
    for s in lookup._stores.values():
        if s is not None:
            s.close()


@pytest.fixture
def ours(db_url, monkeypatch) -> str:
    """The default database ($AUTOTRANSPOSE_DB): autotranspose's, at the head revision."""
    Store.open(db_url).close()
    monkeypatch.setenv("AUTOTRANSPOSE_DB", db_url)
    return db_url


@pytest.fixture
def log(tmp_path) -> Path:
    return tmp_path / "measured.log"


def _best(url: str, cls=CLS, elem_bytes: int = 4):
    with Store.open(url, readonly=True) as s:
        return s.best(DEVICE.name, elem_bytes, cls)


def _child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTRANSPOSE_")}
    return {**env, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)]), **extra}


_SETTLE = textwrap.dedent("""
    import sys
    from autotranspose.dispatch import winners
    from _winners import CALL, logging_measure
    choice = winners.settle(CALL, logging_measure(sys.argv[1]))
    print(choice.source, choice.config.key)
""")


# --- the record path ------------------------------------------------------------------------------
def test_a_winner_is_stored_like_a_tuning_result(ours, log):
    choice = winners.settle(CALL, logging_measure(log, gbps=2500.0))
    assert (choice.source, choice.config, choice.gbps) == ("measured", WINNER, 2500.0)
    assert len(measured(log)) == 1
    e = _best(ours)
    assert (e.source, e.config, e.shape_class, e.shape, e.dtype) == (
        "measured",
        WINNER,
        CLS,
        SHAPE,
        "float32",
    )
    assert e.gbps == pytest.approx(2500.0) and e.copy_gbps == 0 and e.ratio == 0  # no copy timed
    assert e.template_version == codegen.kernel_version(WINNER) and not e.stale
    assert e.measured_at is not None
    with Store.open(ours, readonly=True) as s:
        assert s.measured(DEVICE.name, 4, SHAPE, WINNER) is None  # the tuner measures itself
        with s.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT COUNT(*) FROM at_claims").scalar() == 0
    # this process serves it, and so does the database after the cache is gone
    assert lookup.choose(DEVICE, 4, CLS) == choice
    lookup.clear_cache()
    got = lookup.choose(DEVICE, 4, CLS)
    assert (got.source, got.config, got.shape_class) == ("measured", WINNER, CLS)
    assert not policy.is_guess(got, CLS)


@pytest.mark.parametrize("size", ELEMENT_SIZES)
def test_a_permute_pass_of_words_is_stored_under_its_word_type(ours, log, size):
    """A permute's transpose pass moves words whatever the caller's dtype: its winner is
    recorded under the word type's name (a dtype name the store accepts), not refused."""
    shape = (1, 3000, 5000)
    cls = shape_class(*shape, size)
    call = winners.Call(DEVICE, word_type(size).name, size, shape, cls, False)
    config = default_config(size, max_vector=cls.vec)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a refused row is a RuntimeWarning
        choice = winners.settle(call, logging_measure(log, config=config))
    assert choice.source == "measured"
    e = _best(ours, cls, size)
    assert (e.source, e.dtype, e.config) == ("measured", f"word{size}", config)


def test_a_winner_recorded_here_keeps_what_this_process_prepared(ours, log):
    """Recording a first call's winner (as a user who ran `tune` has a database to record
    into) moves no generation: the other classes' cached choices and the prepared calls of
    every signature stay (their fast paths with them), and the winner serves its class. A
    tuning result recorded in this process still reaches every next call."""
    from autotranspose.dispatch import caches

    other = shape_class(1, 700, 900, 4)
    before = lookup.choose(DEVICE, 4, other)  # cached, as a prepared call's choice is
    generation = lookup.generation
    prepared = object()
    caches.fresh()  # at this generation, as a call's preparation does first
    caches.launches[("a signature prepared before",)] = prepared
    try:
        for _ in range(2):  # measured and recorded, then served from this process's cache
            choice = winners.settle(CALL, logging_measure(log))
            assert (choice.source, choice.config) == ("measured", WINNER)
        assert _best(ours).source == "measured" and len(measured(log)) == 1
        assert lookup.generation == generation
        caches.fresh()
        assert caches.launches[("a signature prepared before",)] is prepared
        assert lookup.choose(DEVICE, 4, other) is before
        assert lookup.choose(DEVICE, 4, CLS) == choice
        # a tuning result in this process: every signature is chosen again
        with Store.open(ours) as s:
            s.record(None, DEVICE, "float32", 4, SHAPE, CLS, GUESS, ok(3000.0))
        assert lookup.generation == generation + 1
        caches.fresh()
        assert ("a signature prepared before",) not in caches.launches
        got = lookup.choose(DEVICE, 4, CLS)
        assert (got.source, got.config) == ("tuned", GUESS)
    finally:
        caches.launches.pop(("a signature prepared before",), None)


def test_a_winner_recorded_here_drops_only_its_own_class_and_problem(ours):
    """A measured best written straight into the store (not through `settle`) reaches lookup
    for its own class and problem only: that class's cached choice is read again, the other
    class's and the other problem's stay."""
    other = shape_class(1, 700, 900, 4)
    mine, theirs = lookup.choose(DEVICE, 4, CLS), lookup.choose(DEVICE, 4, other)
    assert mine.source == theirs.source == "default"
    cast_key = lookup._cast_key(DEVICE.name, DEVICE.limits, "f32_e4m3", False, CLS, True, None)
    lookup._choices[cast_key] = mine  # a cast choice of the same class, another problem
    generation = lookup.generation
    with Store.open(ours) as s:
        s.record(None, DEVICE, "float32", 4, SHAPE, CLS, WINNER, ok(2500.0), source="measured")
    assert lookup.generation == generation
    assert lookup._choices[cast_key] is mine
    assert lookup.choose(DEVICE, 4, other) is theirs
    got = lookup.choose(DEVICE, 4, CLS)
    assert (got.source, got.config) == ("measured", WINNER)


def test_a_copy_ratio_is_kept_when_known(ours):
    winner = winners.Winner(WINNER, 2400.0, copy_gbps=3000.0, seconds=1e-4)
    assert winners.record(winners.writer(), CALL, winner)
    e = _best(ours)
    assert (e.copy_gbps, e.ratio) == (pytest.approx(3000.0), pytest.approx(0.8))


def test_conjugate_or_not_one_row_serves_both(ours, log):
    cfg = default_config(8, max_vector=2, conjugate=True)
    cls = shape_class(1, 3000, 5000, 2)
    call = winners.Call(DEVICE, "complex64", 8, (1, 3000, 5000), cls, True)
    assert winners.settle(call, logging_measure(log, cfg)).config == cfg
    assert _best(ours, cls, 8).config == cfg  # as measured
    lookup.clear_cache()
    plain = winners.settle(call._replace(conjugate=False), logging_measure(log, cfg))
    assert (plain.source, plain.config) == ("measured", cfg.replace(conjugate=False))
    assert len(measured(log)) == 1


@pytest.mark.parametrize("both", [False, True])
def test_a_cast_winner_is_kept_under_its_problem_apart_from_the_transposes(ours, log, both):
    from autotranspose.kernels.config import KernelConfig
    from autotranspose.kinds import cast as cast_kind

    src, dst = cast_kind.BFLOAT16, cast_kind.E4M3
    code = cast_kind.pair_code(src, dst)
    problem = cast_kind.problem(code, both)
    cfg = cast_kind.race_candidates(KernelConfig, src, dst)[-1]
    cls = shape_class(1, 3001, 5003, 1)
    call = winners.Call(DEVICE, "bfloat16", 2, (1, 3001, 5003), cls, False, problem=problem)
    assert winners.claim_key(call) != winners.claim_key(call._replace(problem=""))
    choice = winners.settle(call, logging_measure(log, cfg))
    assert (choice.source, choice.config) == ("measured", cfg)
    with Store.open(ours, readonly=True) as s:
        e = s.best(DEVICE.name, 2, cls, problem)
        assert (e.source, e.config, e.problem) == ("measured", cfg, problem)
        assert s.best(DEVICE.name, 2, cls) is None  # a transpose of the class: nothing
        assert s.best(DEVICE.name, 2, cls, cast_kind.problem(code, not both)) is None
    # served in this process whatever the output's alignment, and from the database after
    for aligned in (True, False):
        assert lookup.cast_choice(DEVICE, code, cls, both=both, aligned_out=aligned) == choice
    other = lookup.cast_choice(DEVICE, code, cls, both=not both)
    assert other.source == "default"
    lookup.clear_cache()
    got = lookup.cast_choice(DEVICE, code, cls, both=both)
    assert (got.source, got.config) == ("measured", cfg)
    # settled again, the stored winner is served without measuring
    lookup.clear_cache()
    assert winners.settle(call, logging_measure(log, cfg)).config == cfg
    assert len(measured(log)) == 1


@pytest.mark.parametrize("square", [False, True])
def test_an_inplace_winner_is_kept_under_its_problem(ours, log, square):
    """transpose_()'s first call records its winner under the in-place problem of its class
    (squares apart from rectangles), served here and from the database after, never to a
    transpose of the same class."""
    from autotranspose.kinds import inplace as inplace_kind

    m, n = (3001, 3001) if square else (3001, 1999)
    cls, problem = policy.inplace_class(1, m, n), policy.inplace_problem(m, n)
    guess = lookup.inplace_choice(DEVICE, 1, 1, m, n)
    assert guess.source == "default" and policy.is_guess(guess, cls)
    candidates = policy.inplace_race(guess.config.params, 1, square)
    assert candidates[0] == guess.config and len(set(candidates)) == len(candidates) > 2
    assert all(c.params.fits(1) for c in candidates)
    cfg = candidates[-1]
    call = winners.Call(DEVICE, "uint8", 1, (1, m, n), cls, False, problem=problem)
    choice = winners.settle(call, logging_measure(log, cfg))
    assert (choice.source, choice.config) == ("measured", cfg)
    with Store.open(ours, readonly=True) as s:
        e = s.best(DEVICE.name, 1, cls, problem)
        assert (e.source, e.config, e.problem, e.shape) == ("measured", cfg, problem, (1, m, n))
        assert s.best(DEVICE.name, 1, cls) is None  # a transpose of the class: nothing
        other = inplace_kind.problem(not square)
        assert s.best(DEVICE.name, 1, cls, other) is None
    assert lookup.inplace_choice(DEVICE, 1, 1, m, n) == choice  # this process
    lookup.clear_cache()
    got = lookup.inplace_choice(DEVICE, 1, 1, m, n)  # the database
    assert (got.source, got.config) == ("measured", cfg) and not policy.is_guess(got, cls)
    lookup.clear_cache()
    assert winners.settle(call, logging_measure(log, cfg)).config == cfg
    assert len(measured(log)) == 1  # settled again: served, not measured


def test_an_inplace_winner_of_few_rows_serves_other_rows_of_its_class(ours, log):
    """transpose()'s few-rows kernels are rendered for their rows, so a winner measured on
    other few rows is measured again; transpose_()'s passes are not, so its winner serves
    the class's other rows."""
    first, other = (1, 24, 1000003), (1, 30, 1000003)
    cls, problem = policy.inplace_class(*first), policy.inplace_problem(24, 1000003)
    assert policy.inplace_class(*other) == cls and policy.other_rows(first, 30, 1000003)
    cfg = policy.inplace_race(lookup.inplace_choice(DEVICE, 1, *first).config.params, 1, False)[-1]
    call = winners.Call(DEVICE, "uint8", 1, first, cls, False, problem=problem)
    assert winners.settle(call, logging_measure(log, cfg)).config == cfg
    lookup.clear_cache()
    got = winners.settle(call._replace(shape=other), logging_measure(log, cfg))
    assert (got.source, got.config) == ("measured", cfg)
    assert len(measured(log)) == 1


def test_an_inplace_winner_serves_only_rows_like_its_own(ours, log, tmp_path, monkeypatch):
    """A class holds odd and even sides, whose passes are other kernels: a shipped or
    measured in-place result measured on rows of whole 16-byte words is raced by an odd
    call's first call, whose winner is kept for the odd rows; the even ones keep theirs."""
    even, odd = (1, 8192, 8192), (1, 8191, 8191)
    cls, problem = policy.inplace_class(*even), policy.inplace_problem(8192, 8192)
    assert policy.inplace_class(*odd) == cls
    assert policy.lines_apart(even, 8191, 8191, 1) and not policy.lines_apart(even, 4096, 8192, 1)
    assert not policy.lines_apart(even, 8191, 8191, 16)  # 16-byte rows: always whole words
    shipped_cfg, odd_cfg = policy.inplace_race(inplace_kind.default(1, True), 1, True)[:2]
    shipped = tmp_path / "tuning_db"
    shipped.mkdir()
    with Store.open("sqlite://") as scratch:
        scratch.record(
            None, DEVICE, "uint8", 1, even, cls, shipped_cfg, ok(3000.0), problem=problem
        )
        (shipped / f"{DEVICE.slug}.json").write_text(textio.dumps(textio.export(scratch)))
    monkeypatch.setattr(lookup, "tuning_db_dir", lambda: shipped)
    lookup.clear_cache()
    served = lookup.inplace_choice(DEVICE, 1, *even)
    assert (served.source, served.config, served.shape) == ("shipped", shipped_cfg, even)
    assert not policy.inplace_raced(served, cls, 1, *even[1:])  # its own rows: served as shipped
    assert policy.inplace_raced(served, cls, 1, *odd[1:])  # odd rows: the first call races it
    call = winners.Call(DEVICE, "uint8", 1, odd, cls, False, problem=problem)
    assert winners.settle(call, logging_measure(log, odd_cfg)).config == odd_cfg
    with Store.open(ours, readonly=True) as s:
        e = s.best(DEVICE.name, 1, cls, problem)
        assert (e.source, e.config, e.shape) == ("measured", odd_cfg, odd)
    lookup.clear_cache()  # another process: the shipped result outranks the measured one...
    again = lookup.inplace_choice(DEVICE, 1, *odd)
    assert again.source == "shipped" and policy.inplace_raced(again, cls, 1, *odd[1:])
    got = winners.settle(call._replace(shape=(1, 8189, 8189)), logging_measure(log, odd_cfg))
    assert (got.source, got.config) == ("measured", odd_cfg)  # ...and odd rows get theirs
    assert len(measured(log)) == 1
    even_call = call._replace(shape=(1, 4096, 4096 + 2048))
    winners.settle(even_call, logging_measure(log, shipped_cfg))  # the odd winner: not served
    assert len(measured(log)) == 2


def test_another_process_serves_the_stored_winner_without_measuring(ours, log):
    winners.settle(CALL, logging_measure(log))
    done = subprocess.run(
        [sys.executable, "-c", _SETTLE, str(log)],
        capture_output=True,
        text=True,
        env=_child_env(AUTOTRANSPOSE_DB=ours),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["measured", WINNER.key]
    assert measured(log) == [str(os.getpid())]


def test_a_winner_recorded_just_before_our_claim_is_served_not_measured_again(
    ours, log, monkeypatch
):
    """The interleaving the process race hits under load: another process records its
    winner and releases its claim between our read of the best and our claim."""
    store = winners.writer()
    claim = store.claim

    def claim_after_the_other(*args, **kw):
        other = winners.Winner(WINNER, 2400.0, copy_gbps=3000.0, seconds=1e-4)
        assert winners.record(store, CALL, other)  # what the process before us stored
        return claim(*args, **kw)

    monkeypatch.setattr(store, "claim", claim_after_the_other)
    choice = winners.settle(CALL, logging_measure(log, GUESS))
    assert (choice.source, choice.config) == ("measured", WINNER) and measured(log) == []
    assert store.claim_holder(winners.STUDY, winners.claim_key(CALL)) is None  # released


# --- concurrent processes -------------------------------------------------------------------------
def _race(url: str, log: Path, processes: int, delay: float) -> list[tuple[int, object]]:
    from _winners import settle_in_child

    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(processes), ctx.Queue()
    procs = [
        ctx.Process(target=settle_in_child, args=(url, str(log), delay, start, out))
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    return answers(procs, out, "a racing process")


def test_processes_racing_for_a_new_class_measure_it_once(ours, log):
    got = _race(ours, log, processes=6, delay=0.3)
    assert len(measured(log)) == 1, measured(log)
    # None: lookup's guess, from a process that stopped waiting after WAIT_S (a loaded machine)
    assert {answer for _, answer in got} <= {("measured", WINNER.key), None}
    assert ("measured", WINNER.key) in {answer for _, answer in got}
    e = _best(ours)
    assert (e.source, e.config) == ("measured", WINNER)
    with Store.open(ours, readonly=True) as s, s.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM at_claims").scalar() == 0


def _age_claims(url: str, seconds: float) -> None:
    """Make every claim look `seconds` old (as if its process had died that long ago)."""
    engine = sa.create_engine(resolve_url(url))
    with engine.begin() as conn:
        conn.execute(sa.update(Claim).values(created_at=writes.now() - timedelta(seconds=seconds)))
    engine.dispose()


def test_processes_racing_over_a_stale_claim_measure_once(ours, log):
    with Store.open(ours) as s:
        assert s.claim(winners.STUDY, winners.claim_key(CALL), "dead-host:1:0")
    _age_claims(ours, winners.CLAIM_EXPIRE_S + 5)
    got = _race(ours, log, processes=5, delay=0.3)
    assert len(measured(log)) == 1
    assert {answer for _, answer in got} <= {("measured", WINNER.key), None}
    assert ("measured", WINNER.key) in {answer for _, answer in got}


def test_a_crashed_measurement_is_taken_over_when_its_claim_expires(ours, log, monkeypatch):
    from _winners import claim_and_die

    monkeypatch.setattr(winners, "CLAIM_EXPIRE_S", 1.0)
    monkeypatch.setattr(winners, "WAIT_S", 10.0)
    ctx = multiprocessing.get_context("spawn")
    claimed = ctx.Event()
    p = ctx.Process(target=claim_and_die, args=(ours, claimed))
    p.start()
    try:
        assert claimed.wait(60)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.join(30)
    started = time.monotonic()
    choice = winners.settle(CALL, logging_measure(log))
    waited = time.monotonic() - started
    assert (choice.source, choice.config) == ("measured", WINNER)
    assert measured(log) == [str(os.getpid())]
    assert 0.3 < waited < 8, waited  # waited for the dead claim to expire, not for WAIT_S
    assert _best(ours).source == "measured"


def _until(condition, seconds: float = 10.0) -> float:
    """Wait for condition() (polling); the seconds it took."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < seconds, f"not within {seconds} s"
        time.sleep(0.01)
    return time.monotonic() - started


def test_a_loser_waits_for_the_winner_bounded_then_serves_the_guess(ours, log):
    key = winners.claim_key(CALL)
    with Store.open(ours) as other:  # another process, measuring
        assert other.claim(winners.STUDY, key, "other-host:7:abc")
        assert lookup.choose(DEVICE, 4, CLS).source == "default"  # as dispatch asks first
        started = time.monotonic()
        assert winners.settle(CALL, logging_measure(log)) is None  # lookup's guess, now
        # bounded: WAIT_S, not the database's busy timeout (the margin is a loaded machine's)
        assert winners.WAIT_S <= time.monotonic() - started < winners.WAIT_S + 5
        assert measured(log) == []
        assert lookup.choose(DEVICE, 4, CLS).source == "default"  # nothing remembered
        assert winners.pending() == [CALL]  # read again in the background
        generation = lookup.generation
        time.sleep(0.3)  # still measuring: the guess stays, the generation too
        assert winners.pending() == [CALL] and lookup.generation == generation
        assert lookup.choose(DEVICE, 4, CLS).source == "default"
        # the other process records and releases: a later call serves its row
        other.record(
            None, DEVICE, "float32", 4, SHAPE, CLS, WINNER, ok(2000.0, 0.0), source="measured"
        )
        other.release(winners.STUDY, key, "other-host:7:abc")
    assert _until(lambda: not winners.pending()) < winners.RECHECK_S[1] + 5
    assert lookup.generation != generation  # the prepared launches of the class are dropped
    got = lookup.choose(DEVICE, 4, CLS)
    assert (got.source, got.config) == ("measured", WINNER) and measured(log) == []
    choice = winners.settle(CALL, logging_measure(log))
    assert (choice.source, choice.config) == ("measured", WINNER) and measured(log) == []


def test_a_pending_class_leaves_pending_only_once_lookup_forgot_its_guess(ours, log, monkeypatch):
    """The poller renews lookup before the class leaves `pending()`: once nothing is pending,
    the next call asks the database (the other order let a call in between serve the guess,
    which eight racing processes on a loaded machine hit)."""
    key = winners.claim_key(CALL)
    seen = []
    renew = lookup.renew

    def watched(*args, **kwargs):
        seen.append(list(winners.pending()))
        renew(*args, **kwargs)

    monkeypatch.setattr(lookup, "renew", watched)
    with Store.open(ours) as other:
        assert other.claim(winners.STUDY, key, "other-host:7:abc")
        assert winners.settle(CALL, logging_measure(log)) is None
        other.record(
            None, DEVICE, "float32", 4, SHAPE, CLS, WINNER, ok(2000.0, 0.0), source="measured"
        )
        other.release(winners.STUDY, key, "other-host:7:abc")
    _until(lambda: not winners.pending())
    assert seen == [[CALL]]  # renewed while the class was still pending
    got = lookup.choose(DEVICE, 4, CLS)
    assert (got.source, got.config) == ("measured", WINNER)


def test_a_pending_cast_class_is_served_the_other_process_winner(ours, log):
    """As a transpose's: a cast-transpose's first call stops waiting for another process's
    measurement, and once its winner is recorded, lookup serves it to the class's problem,
    whatever the output's alignment."""
    from autotranspose.kernels.config import KernelConfig
    from autotranspose.kinds import cast as cast_kind

    src, dst = cast_kind.BFLOAT16, cast_kind.E4M3
    code = cast_kind.pair_code(src, dst)
    problem = cast_kind.problem(code, False)
    cfg = cast_kind.race_candidates(KernelConfig, src, dst)[-1]
    cls = shape_class(1, 3001, 5003, 1)
    call = winners.Call(DEVICE, "bfloat16", 2, (1, 3001, 5003), cls, False, problem=problem)
    key = winners.claim_key(call)
    with Store.open(ours) as other:
        assert other.claim(winners.STUDY, key, "other-host:8:abc")
        for aligned in (True, False):
            assert lookup.cast_choice(DEVICE, code, cls, aligned_out=aligned).source == "default"
        assert winners.settle(call, logging_measure(log, cfg)) is None
        assert winners.pending() == [call] and measured(log) == []
        other.record(
            None, DEVICE, "bfloat16", 2, call.shape, cls, cfg, ok(2000.0, 0.0),
            source="measured", problem=problem,
        )  # fmt: skip
        other.release(winners.STUDY, key, "other-host:8:abc")
    _until(lambda: not winners.pending())
    for aligned in (True, False):
        got = lookup.cast_choice(DEVICE, code, cls, aligned_out=aligned)
        assert (got.source, got.config) == ("measured", cfg)


def test_a_pending_class_whose_claimant_died_is_measured_by_a_later_call(ours, log, monkeypatch):
    """The claimant dies measuring: once its claim is stale the class is not pending any
    more, and the next first call of the class measures it (once)."""
    monkeypatch.setattr(winners, "CLAIM_EXPIRE_S", 3.0)  # past WAIT_S: the call stops waiting
    winners.writer()
    with Store.open(ours) as other:
        assert other.claim(winners.STUDY, winners.claim_key(CALL), "dead-host:7:abc")
    assert winners.settle(CALL, logging_measure(log)) is None and winners.pending() == [CALL]
    _until(lambda: not winners.pending())
    assert lookup.choose(DEVICE, 4, CLS).source == "default"  # nothing there: still a guess
    choice = winners.settle(CALL, logging_measure(log))
    assert (choice.source, choice.config) == ("measured", WINNER) and len(measured(log)) == 1
    assert _best(ours).config == WINNER


def test_no_transaction_is_open_while_the_winner_is_measured(ours, tmp_path):
    """Another process can write the database while a first call measures (SQLite has one
    writer at a time: a write transaction held across the measurement would stall it)."""
    path = sqlite_path(resolve_url(ours))
    if path is None:
        pytest.skip("SQLite's write lock")
    import sqlite3

    free = []

    def measure() -> winners.Winner:
        conn = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")  # fails at once if anyone holds the write lock
            conn.execute("ROLLBACK")
            free.append(True)
        finally:
            conn.close()
        return winners.Winner(WINNER, 2000.0)

    assert winners.settle(CALL, measure).config == WINNER and free == [True]


def test_a_write_lock_held_elsewhere_stalls_a_first_call_a_second_at_most(ours, log):
    """Another connection holds the write lock for seconds (a large import): the first call
    waits about BUSY_S for its claim, then measures for itself and keeps the winner in this
    process, with one warning; it never raises."""
    path = sqlite_path(resolve_url(ours))
    if path is None:
        pytest.skip("SQLite's write lock")
    import sqlite3

    winners.writer()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.warns(RuntimeWarning, match="kept in this process only") as caught:
            choice = winners.settle(CALL, logging_measure(log))
        took = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (choice.source, choice.config) == ("measured", WINNER) and len(measured(log)) == 1
    assert winners.BUSY_S <= took < winners.BUSY_S + 5, took  # not the engine's 30 s
    assert len([w for w in caught if "first-call" in str(w.message)]) == 1
    assert lookup.choose(DEVICE, 4, CLS) == choice  # kept in this process


def test_a_released_claim_lets_the_waiter_measure(ours, log, monkeypatch):
    """A claimant whose measurement found nothing (a captured stream) drops its claim: a
    process waiting for it measures instead of serving the guess."""
    key = winners.claim_key(CALL)
    with Store.open(ours) as other:
        assert other.claim(winners.STUDY, key, "other-host:7:abc")
        calls = []

        def measure():
            calls.append(1)
            return winners.Winner(WINNER, 2000.0)

        real_sleep = time.sleep

        def sleep(s):  # the claimant gives up while we wait
            other.release(winners.STUDY, key, "other-host:7:abc")
            real_sleep(s)

        monkeypatch.setattr(winners.time, "sleep", sleep)
        assert winners.settle(CALL, measure).config == WINNER and calls == [1]


def test_nothing_found_releases_the_claim(ours):
    assert winners.settle(CALL, lambda: None) is None
    with Store.open(ours, readonly=True) as s:
        assert s.claim_holder(winners.STUDY, winners.claim_key(CALL)) is None
        assert s.best(DEVICE.name, 4, CLS) is None


def test_a_stored_config_this_call_cannot_run_is_not_served(ours, log):
    winners.record(winners.writer(), CALL, winners.Winner(WINNER, 2000.0))
    lookup.clear_cache()
    own = staged_default(4)
    choice = winners.settle(CALL, logging_measure(log, own), runnable=lambda c: c != WINNER)
    assert (choice.source, choice.config) == ("measured", own) and len(measured(log)) == 1
    assert _best(ours).config == WINNER  # the stored one stays (this one was not faster)


def test_a_winner_measured_on_other_few_rows_is_measured_again_for_these_rows(ours, log):
    """A class of few rows spans rows up to twice apart: a stored winner measured on other
    rows is not served to this call's rows, which measure their own (kept in-process); the
    same rows, or a class of many rows, are served the stored winner."""
    rng = random.Random()
    m = rng.randint(100, 127)
    cls = shape_class(1, m, 2000003, 1)
    first = winners.Call(DEVICE, "float32", 4, (1, m, 2000003), cls, False)
    winners.record(winners.writer(), first, winners.Winner(WINNER, 2000.0))
    lookup.clear_cache()
    other = winners.Call(DEVICE, "float32", 4, (1, m + 1, 2000003), cls, False)
    own = staged_default(4)
    choice = winners.settle(other, logging_measure(log, own))
    assert (choice.source, choice.config, choice.shape) == ("measured", own, other.shape)
    assert len(measured(log)) == 1
    assert _best(ours, cls).shape == first.shape  # the stored one stays
    lookup.clear_cache()
    again = winners.settle(first, logging_measure(log, own))
    assert (again.config, again.shape) == (WINNER, first.shape) and len(measured(log)) == 1


# --- tuned outranks measured ----------------------------------------------------------------------
def test_a_measured_result_never_replaces_a_tuned_one(ours, log, template_version):
    with Store.open(ours) as s:
        s.record(None, DEVICE, "float32", 4, SHAPE, CLS, GUESS, ok(500.0))
    faster = winners.Winner(WINNER, 2900.0)
    assert not winners.record(winners.writer(), CALL, faster)
    e = _best(ours)
    assert (e.source, e.config) == ("tuned", GUESS)
    # a current tuned result is served, not measured again
    choice = winners.settle(CALL, logging_measure(log))
    assert (choice.source, choice.config, measured(log)) == ("tuned", GUESS, [])


def test_a_stale_tuned_result_is_not_replaced_either(ours, log, template_version):
    template_version("from-older-templates")
    with Store.open(ours) as s:
        s.record(None, DEVICE, "float32", 4, SHAPE, CLS, GUESS, ok(500.0))
    template_version()
    choice = winners.settle(CALL, logging_measure(log))  # measured: the tuned one is stale
    assert (choice.source, choice.config) == ("measured", WINNER) and len(measured(log)) == 1
    with Store.open(ours, readonly=True) as s:
        (e,) = s.entries(DEVICE.name)
    assert (e.source, e.config, e.stale) == ("tuned", GUESS, True)
    assert lookup.choose(DEVICE, 4, CLS).source == "measured"  # in this process


@pytest.mark.parametrize("gbps", [100.0, 2900.0], ids=["slower", "faster"])
def test_a_tuned_result_replaces_a_measured_one(ours, gbps):
    winners.record(winners.writer(), CALL, winners.Winner(WINNER, 2500.0))
    with Store.open(ours) as s:
        assert s.record(None, DEVICE, "float32", 4, SHAPE, CLS, GUESS, ok(gbps))
    e = _best(ours)
    assert (e.source, e.config, e.gbps) == ("tuned", GUESS, gbps)
    # and a later measured one does not come back over it
    assert not winners.record(winners.writer(), CALL, winners.Winner(WINNER, 9000.0))


def test_tune_replaces_measured_results_of_its_class(ours):
    shape = (1, 2048, 2048)
    cls = shape_class(*shape, max_vec(4, 2048, 2048))
    call = winners.Call(SYNTHETIC, "float32", 4, shape, cls, False)
    measured_cfg = default_config(4, max_vector=cls.vec)
    winners.record(winners.writer(), call, winners.Winner(measured_cfg, 99_000.0))
    objective = SyntheticObjective(SYNTHETIC)
    with Store.open(ours) as s:
        result = tune("float32", shape, objective=objective, store=s, device=SYNTHETIC, trials=6)
        e = s.best(SYNTHETIC.name, 4, cls)
    assert e.source == "tuned" and e.gbps < 99_000.0  # the first call's figure is gone
    assert result.reused == 0 and measured_cfg in objective.calls  # measured again, by the tuner


def test_lookup_prefers_a_shipped_tuned_result_to_a_measured_one(ours, tmp_path, monkeypatch):
    shipped = tmp_path / "tuning_db"
    shipped.mkdir()
    with Store.open("sqlite://") as scratch:
        scratch.record(None, DEVICE, "float32", 4, SHAPE, CLS, GUESS, ok(1000.0))
        (shipped / f"{DEVICE.slug}.json").write_text(textio.dumps(textio.export(scratch)))
    winners.record(winners.writer(), CALL, winners.Winner(WINNER, 2500.0))
    lookup.clear_cache()
    assert lookup.choose(DEVICE, 4, CLS).source == "measured"  # nothing shipped yet
    monkeypatch.setattr(lookup, "tuning_db_dir", lambda: shipped)
    lookup.clear_cache()
    c = lookup.choose(DEVICE, 4, CLS)
    assert (c.source, c.config) == ("shipped", GUESS)


# --- where nothing may be written -----------------------------------------------------------------
def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_no_default_database_none_is_created(isolated_home, log):
    choice = winners.settle(CALL, logging_measure(log))
    assert (choice.source, choice.config) == ("measured", WINNER)  # kept in this process
    assert lookup.choose(DEVICE, 4, CLS) == choice
    assert not isolated_home.exists() and not isolated_home.parent.exists()


def test_a_foreign_database_is_left_byte_identical(foreign_db, log, monkeypatch):  # noqa: F811
    monkeypatch.setenv("AUTOTRANSPOSE_DB", str(foreign_db))
    before = snapshot(foreign_db.parent)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # lookup's warning about it
        choice = winners.settle(CALL, logging_measure(log))
    assert choice.source == "measured" and len(measured(log)) == 1
    assert snapshot(foreign_db.parent) == before


def test_an_older_schema_is_not_migrated_and_says_so_once(db_url, log, monkeypatch):
    upgrade(db_url, revision="0003")
    monkeypatch.setenv("AUTOTRANSPOSE_DB", db_url)
    path = sqlite_path(resolve_url(db_url))
    before = _sha(path) if path is not None else None
    with pytest.warns(RuntimeWarning, match="db upgrade") as caught:
        winners.settle(CALL, logging_measure(log))
        lookup.clear_cache()
        winners.settle(CALL, logging_measure(log))
    assert len([w for w in caught if "first-call" in str(w.message)]) == 1
    assert len(measured(log)) == 2  # nothing shared: each first call measures
    with Store.open(db_url, readonly=True) as s:
        assert s.schema_revision() == "0003" and s.entries() == []
    if path is not None:
        assert _sha(path) == before


def test_a_read_only_database_is_read_not_written(read_only_dir, tmp_path):  # noqa: F811
    directory, setup = read_only_dir
    path = directory / "tuning.db"
    Store.open(path).close()
    _make_read_only(directory, setup)
    before = snapshot(directory)
    log = tmp_path / "measured.log"
    code = "import warnings; warnings.simplefilter('error')\n" + _SETTLE
    done = subprocess.run(
        prepared(setup, [sys.executable, "-c", code, str(log)]),
        capture_output=True,
        text=True,
        env=_child_env(AUTOTRANSPOSE_DB=str(path)),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["measured", WINNER.key] and len(measured(log)) == 1
    assert snapshot(directory) == before


@pytest.mark.parametrize("how", ["env", "api"])
def test_switched_off_nothing_is_stored(ours, log, monkeypatch, how):
    if how == "env":
        monkeypatch.setenv(winners.ENV_VAR, "0")
    else:
        winners.set_enabled(False)
    assert not winners.enabled() and winners.writer() is None
    choice = winners.settle(CALL, logging_measure(log))
    assert choice.source == "measured" and len(measured(log)) == 1
    assert _best(ours) is None
    winners.set_enabled(True)
    assert winners.enabled() and winners.writer() is not None


# --- show, export, import -------------------------------------------------------------------------
def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = cli.run(list(argv), stdout=out, stderr=err)
    return rc, out.getvalue(), err.getvalue()


def test_show_marks_measured_entries(ours):
    winners.record(winners.writer(), CALL, winners.Winner(WINNER, 2500.0))
    rc, out, err = _cli("show", "--json", "--db", ours)
    assert rc == 0, err
    assert [e["source"] for e in json.loads(out)] == ["measured"]
    rc, out, err = _cli("show", "--db", ours)
    assert rc == 0 and "measured" in out and "`tune` replaces it" in out, err


def test_export_and_import_keep_the_source(ours, tmp_path):
    winners.record(winners.writer(), CALL, winners.Winner(WINNER, 2500.0))
    other = CALL._replace(shape=(1, 6000, 5000), cls=shape_class(1, 6000, 5000, 4))
    with Store.open(ours) as s:
        s.record(None, DEVICE, "float32", 4, other.shape, other.cls, GUESS, ok(1000.0))
        doc = textio.export(s)
    by_class = {e["shape_class"]: e for e in doc["entries"]}
    assert by_class[str(CLS)]["source"] == "measured"
    assert "source" not in by_class[str(other.cls)]  # tuned files read as they always did
    with Store.open(tmp_path / "copy.db") as copy:
        textio.import_into(copy, doc)
        got = {str(e.shape_class): e.source for e in copy.entries()}
        assert got == {str(CLS): "measured", str(other.cls): "tuned"}
        # an imported measured result does not replace a tuned one either
        flipped = json.loads(json.dumps(doc))
        for e in flipped["entries"]:
            e["source"] = "measured"
            e["gbps"], e["ratio"] = (
                2999.0,
                round(2999.0 / e["copy_gbps"], 4) if e["copy_gbps"] else 0,
            )
        textio.import_into(copy, flipped)
        assert {str(e.shape_class): e.source for e in copy.entries()}[str(other.cls)] == "tuned"


def test_a_file_with_an_unknown_source_is_refused():
    with Store.open("sqlite://") as s:
        s.record(None, DEVICE, "float32", 4, SHAPE, CLS, GUESS, ok(1000.0))
        doc = textio.export(s)
    doc["entries"][0]["source"] = "guessed"
    with pytest.raises(StoreError, match="source 'guessed'"):
        textio.parse(doc)


def test_claims_expire_only_when_asked(store):
    assert store.claim("s", "k", "a")
    assert not store.claim("s", "k", "b", expire_s=60)  # fresh: kept
    time.sleep(0.3)
    assert not store.claim("s", "k", "b")  # no expiry asked: kept
    assert store.claim("s", "k", "b", expire_s=0.2)  # stale: taken over
    owner, since = store.claim_holder("s", "k")
    assert owner == "b" and (writes.now() - since).total_seconds() < 5
    assert store.claim_holder("s", "other") is None


# --- eight processes' first calls at once ---------------------------------------------------------
RACERS = 8


def _first_calls_at_once(url: str, tmp_path: Path, delays: tuple[float, ...]) -> list[dict]:
    """RACERS processes (`_winners.race_child`) make the first calls of the same classes at
    once, released together when every one is ready; their reports."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    log = tmp_path / "measured"
    code = "from _winners import race_child; race_child()"
    spec = ",".join(str(d) for d in delays)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, url, str(log), str(i), str(barrier), spec],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_child_env(),
        )
        for i in range(RACERS)
    ]
    try:
        deadline = time.monotonic() + 120
        while len(list(barrier.glob("ready-*"))) < RACERS:
            assert time.monotonic() < deadline, "the processes were not ready within 120 s"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.01)
        (barrier / "go").touch()
        outputs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_eight_processes_first_calls_at_once_measure_each_class_once(db, tmp_path, request):
    """Eight processes meet the same new classes at once (a multi-GPU job or a test runner
    starting), each measurement taking what one on a GPU takes, the last one as long as a
    measurement with a cold compiler cache. Each class is measured by one process and stored
    once; every process serves that winner, at once or, where it stopped waiting, on a later
    call; no call waits more than about a second beyond its own measurement; no warning."""
    from _winners import own_winner, race_classes

    url = str(tmp_path / "tuning.db") if db == "sqlite" else request.getfixturevalue("pg_url")
    Store.open(url).close()
    delays = (0.1, 0.15, 2.5)
    reports = _first_calls_at_once(url, tmp_path, delays)
    calls = race_classes(len(delays))
    keys = {own_winner(i).key: i for i in range(RACERS)}
    with Store.open(url, readonly=True) as s:
        with s.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT shape_class, COUNT(*) FROM at_measurements GROUP BY shape_class"
            ).all()
            assert conn.exec_driver_sql("SELECT COUNT(*) FROM at_claims").scalar() == 0
        best = {k: s.best(DEVICE.name, 4, call.cls) for k, call in enumerate(calls)}
    assert sorted(rows) == sorted((str(c.cls), 1) for c in calls)  # each winner written once
    for k, delay in enumerate(delays):
        who = [r for r in reports if r["calls"][k]["measured"]]
        assert len(who) == 1, (k, reports)  # measured by one process
        assert len(measured(tmp_path / f"measured.{k}")) == 1
        winner = best[k]
        assert winner.source == "measured" and keys[winner.config.key] == reports.index(who[0])
        for r in reports:
            call = r["calls"][k]
            own = delay if call["measured"] else 0.0
            assert call["s"] - own < 2.0, (k, call)  # about a second (WAIT_S), a loaded machine
            if call["served"] is None:  # stopped waiting: a later call serves the winner
                assert r["later"][str(k)] == ["measured", winner.config.key], (k, r)
                assert r["generation_moved"] and r["pending"] == 0
            else:
                assert call["served"] == winner.config.key, (k, call)
    # the slow class: the others stopped waiting after about a second (all of them, unless a
    # process starved by a loaded machine came to it only once its winner was there)
    assert sum(r["calls"][2]["served"] is None for r in reports) >= 1
    assert [r["warnings"] for r in reports] == [[]] * RACERS
