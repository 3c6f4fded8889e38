"""Choosing a config for a call: tuned, nearest, shipped, default; and the in-process cache."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import sqlalchemy as sa
from store_data import A100, H100, count_queries, ok, space, valid_config

from autotranspose.dispatch import lookup, policy
from autotranspose.kernels.config import PRMT_SERVED, default_config, prmt_default, staged_default
from autotranspose.kernels.shapes import ShapeClass, shape_class
from autotranspose.kinds import cast as cast_kind, inplace as inplace_kind
from autotranspose.store import BadRowWarning, Store, hooks, textio

pytest_plugins = ("store_fixtures",)
pytestmark = pytest.mark.usefixtures("isolated_home")

CLS = ShapeClass(1, 4096, 4096, 4)
_REAL_TUNING_DB_DIR = lookup.tuning_db_dir


@pytest.fixture(autouse=True)
def fresh_lookup(monkeypatch, tmp_path):
    """No shipped files unless a test writes some; an empty cache before and after."""
    shipped = tmp_path / "tuning_db"
    shipped.mkdir()
    monkeypatch.setattr(lookup, "tuning_db_dir", lambda: shipped)
    monkeypatch.setattr(lookup, "_stores", {})
    monkeypatch.setattr(lookup, "_warned", set())
    lookup.clear_cache()
    yield shipped
    lookup.clear_cache()


def _record(store, device, cls, config, gbps, elem_bytes=4):
    b, m, n = cls.batch, cls.m, cls.n
    dtype = {1: "int8", 2: "float16", 4: "float32", 8: "complex64", 16: "complex128"}[elem_bytes]
    store.record(None, device, dtype, elem_bytes, (b, m, n), cls, config, ok(gbps))


def _configs(rng, elem_bytes=4, vec=4, count=3):
    pool = [c for c in space(elem_bytes, vec) if c.vec == vec]
    return [pool[i] for i in rng.choice(len(pool), size=count, replace=False)]


def _ship(directory, device, entries):
    """Write a shipped tuning file with these (class, config, gbps) entries."""
    with Store.open("sqlite://") as scratch:
        for cls, config, gbps in entries:
            _record(scratch, device, cls, config, gbps, config.elem_bytes)
        (directory / f"{device.slug}.json").write_text(textio.dumps(textio.export(scratch)))


# --- the fall-through order -------------------------------------------------------------------------
def test_falls_through_tuned_nearest_shipped_default(store, rng, fresh_lookup):
    tuned, shipped = _configs(rng, count=2)
    other = ShapeClass(1, 4096, 8192, 4)
    far = ShapeClass(1, 256, 256, 4)
    _ship(
        fresh_lookup, H100, [(CLS, shipped, 900.0), (other, shipped, 900.0), (far, shipped, 800.0)]
    )
    _record(store, H100, CLS, tuned, 1500.0)

    # 1. this device's entry for exactly this class
    c = lookup.choose(H100, 4, CLS, store=store)
    assert (c.source, c.config, c.shape_class, c.gbps) == ("tuned", tuned, CLS, 1500.0)
    assert c.ratio == pytest.approx(0.5)
    # 2. its nearest tuned class, even where a shipped file has the exact class
    c = lookup.choose(H100, 4, other, store=store)
    assert (c.source, c.config, c.shape_class) == ("nearest", tuned, CLS)
    # 3. nothing tuned: shipped results, exact then nearest
    with Store.open("sqlite://") as empty:
        c = lookup.choose(H100, 4, CLS, store=empty)
        assert (c.source, c.config, c.shape_class) == ("shipped", shipped, CLS)
        c = lookup.choose(H100, 4, ShapeClass(1, 512, 512, 4), store=empty)
        assert (c.source, c.shape_class) == ("shipped", far)
    assert lookup.choose(H100.name, 4, CLS, store=None).source == "shipped"  # no database
    # 4. nothing tuned or shipped for this GPU or element size: the default
    for device, elem_bytes in ((A100, 4), (H100, 2)):
        c = lookup.choose(device, elem_bytes, CLS, store=store)
        assert (c.source, c.shape_class, c.gbps) == ("default", None, None)
        assert c.config == default_config(elem_bytes, max_vector=4)


def test_nearest_is_the_closest_class(store, rng):
    configs = _configs(rng, count=4)
    classes = [ShapeClass(1, 1 << k, 1 << k, 4) for k in (8, 10, 12, 14)]
    for cls, config in zip(classes, configs, strict=True):
        _record(store, H100, cls, config, 1000.0)
    for k, want in ((7, 0), (9, 0), (11, 1), (13, 2), (20, 3)):
        c = lookup.choose(H100, 4, ShapeClass(1, 1 << k, 1 << k, 4), store=store)
        assert (c.source, c.shape_class) == ("nearest", classes[want])


@pytest.mark.parametrize("call_vec", [1, 2])
def test_never_serves_wider_vectors_than_the_call_allows(store, rng, call_vec):
    (wide,) = _configs(rng, vec=4, count=1)
    _record(store, H100, CLS, wide, 2000.0)
    narrow_cls = dataclasses.replace(CLS, vec=call_vec)
    c = lookup.choose(H100, 4, narrow_cls, store=store)
    assert c.source == "default" and (c.config.vec <= call_vec or c.config.any_offset)
    # a class tuned at v4 with a narrow config can serve the narrow call, as nearest; rows at
    # odd offsets (vec 1) take the staged kernel instead of another class's result
    (narrow,) = _configs(rng, vec=call_vec, count=1)
    _record(store, H100, ShapeClass(1, 2048, 2048, 4), narrow, 1900.0)
    c = lookup.choose(H100, 4, narrow_cls, store=store)
    if call_vec == 1:
        assert (c.source, c.config) == ("default", staged_default(4))
    else:
        assert (c.source, c.config) == ("nearest", narrow)


def test_never_serves_a_config_the_device_cannot_run(store):
    big = max((c for c in space(4, 4)), key=lambda c: c.threads)
    _record(store, H100, CLS, big, 2000.0)
    small_gpu = dataclasses.replace(H100, max_threads_per_block=big.threads // 2)
    assert lookup.choose(small_gpu, 4, CLS, store=store).source == "default"
    assert lookup.choose(H100, 4, CLS, store=store).config == big


def test_stale_entries_are_not_served(store, rng, template_version, fresh_lookup):
    (config,) = _configs(rng, count=1)
    template_version("00000000deadbeef")
    _record(store, H100, CLS, config, 2000.0)
    _ship(fresh_lookup, H100, [(CLS, config, 2000.0)])
    template_version()  # the templates changed since
    c = lookup.choose(H100, 4, CLS, store=store)
    assert c.source == "default"
    assert [e.stale for e in store.entries()] == [True]


def test_conjugate_is_applied_to_any_source(store, rng):
    (config,) = _configs(rng, elem_bytes=8, vec=2, count=1)
    cls = ShapeClass(1, 1024, 1024, 2)
    _record(store, H100, cls, config, 1000.0, elem_bytes=8)
    for device in (H100, A100):  # tuned, default
        plain = lookup.choose(device, 8, cls, store=store)
        conj = lookup.choose(device, 8, cls, store=store, conjugate=True)
        assert conj.config == plain.config.replace(conjugate=True) and not plain.config.conjugate


# --- the cache ------------------------------------------------------------------------------------
def test_second_call_queries_nothing(store, rng):
    (config,) = _configs(rng, count=1)
    _record(store, H100, CLS, config, 1000.0)
    queries = count_queries(store.engine)
    first = lookup.choose(H100, 4, CLS, store=store)
    assert queries, "the first call reads the database"
    seen = len(queries)
    for _ in range(5):
        assert lookup.choose(H100, 4, CLS, store=store) is first
    assert len(queries) == seen
    by_name = lookup.choose(H100.name, 4, CLS, store=store)  # no limits known: another key
    assert by_name.config == first.config and len(queries) > seen
    seen = len(queries)
    assert lookup.choose(H100.name, 4, CLS, store=store) is by_name
    lookup.choose(H100, 4, CLS, store=store, conjugate=False)
    assert len(queries) == seen
    lookup.choose(H100, 4, dataclasses.replace(CLS, m=8192), store=store)  # another key
    assert len(queries) > seen


def test_a_new_best_invalidates_the_cache(store, rng):
    slow, fast = _configs(rng, count=2)
    _record(store, H100, CLS, slow, 1000.0)
    assert lookup.choose(H100, 4, CLS, store=store).config == slow
    _record(store, H100, CLS, fast, 2000.0)  # the store clears lookup's cache
    assert lookup.choose(H100, 4, CLS, store=store).config == fast


def test_clear_cache_sees_other_processes_results(db_url, rng, monkeypatch):
    slow, fast = _configs(rng, count=2)
    with Store.open(db_url) as mine, Store.open(db_url) as theirs:
        _record(mine, H100, CLS, slow, 1000.0)
        assert lookup.choose(H100, 4, CLS, store=mine).config == slow
        # another process cannot clear our cache: write as it would
        with monkeypatch.context() as m:
            m.setattr(hooks, "_listeners", [])
            _record(theirs, H100, CLS, fast, 2000.0)
        assert lookup.choose(H100, 4, CLS, store=mine).config == slow  # cached
        lookup.clear_cache()
        assert lookup.choose(H100, 4, CLS, store=mine).config == fast


# --- the default database ------------------------------------------------------------------------
def test_lookup_does_not_create_the_default_database(isolated_home):
    c = lookup.choose(H100, 4, CLS)
    assert c.source == "default"
    assert not isolated_home.exists() and not isolated_home.parent.exists()


def test_lookup_reads_an_existing_default_database(isolated_home, rng):
    (config,) = _configs(rng, count=1)
    with Store.open() as store:  # the user tuned before
        _record(store, H100, CLS, config, 1000.0)
    lookup.clear_cache()
    assert lookup.choose(H100, 4, CLS).config == config


# Run by a fresh Python, which forks: the test process may have imported JAX, whose threads
# a forked child would not have (JAX warns of a deadlock at every fork).
_FORKING_PARENT = """
import multiprocessing, sys
from store_data import H100
from autotranspose.dispatch import lookup
from autotranspose.kernels.shapes import ShapeClass

def choose_in_child(out):
    out.put(lookup.choose(H100, 4, ShapeClass(1, 2048, 2048, 4)).source)

if __name__ == "__main__":
    print(lookup.choose(H100, 4, ShapeClass(1, 4096, 4096, 4)).source)  # holds the store open
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=choose_in_child, args=(out,))
    child.start()
    print(out.get(timeout=60))
    child.join(timeout=30)
    print(child.exitcode)
    print(lookup.choose(H100, 4, ShapeClass(1, 2048, 2048, 4)).source)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_reopens_the_default_database(isolated_home, rng):
    (config,) = _configs(rng, count=1)
    isolated_home.parent.mkdir(parents=True)
    with Store.open(isolated_home) as store:
        _record(store, H100, CLS, config, 1000.0)
    tests = Path(__file__).resolve().parent
    env = {
        **os.environ,
        "AUTOTRANSPOSE_DB": str(isolated_home),  # the default database, as the test's own
        "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent)]),
    }
    done = subprocess.run(
        [sys.executable, "-c", _FORKING_PARENT],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    # the parent's tuned entry; the child's nearest one, through its own connection; the child
    # exited cleanly; the parent's connection still works
    assert done.stdout.split() == ["tuned", "nearest", "0", "nearest"], done.stderr


@pytest.mark.parametrize("kind", ["foreign", "garbage"])
def test_unusable_default_database_warns_once_and_falls_through(tmp_path, monkeypatch, kind):
    path = tmp_path / "theirs.db"
    if kind == "foreign":
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE users (id INTEGER)")
    else:
        path.write_bytes(b"\x89PNG not a database" * 50)
    monkeypatch.setenv("AUTOTRANSPOSE_DB", str(path))
    with pytest.warns(RuntimeWarning, match="not an autotranspose tuning database"):
        assert lookup.choose(H100, 4, CLS).source == "default"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lookup.choose(H100, 2, CLS).source == "default"  # no second warning


def test_bad_rows_never_reach_a_kernel(store, rng, monkeypatch):
    """A tampered best row is skipped (with a warning); the call gets a sound config."""
    from autotranspose.kernels import codegen

    rendered = []
    real = codegen.kernel_params
    monkeypatch.setattr(codegen, "kernel_params", lambda c: rendered.append(c) or real(c))
    good = valid_config(4, 4)
    _record(store, H100, ShapeClass(1, 1024, 1024, 4), good, 1000.0)
    evil = json.dumps({**good.to_dict(), "tile_m": '32; asm("trap;")'})
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE at_configs SET config_json = :j"), {"j": evil})
    with pytest.warns(BadRowWarning):
        c = lookup.choose(H100, 4, CLS, store=store)
    assert c.source == "default"
    source = codegen.render(c.config)
    # rendered: the served config, and the good config (for its kernel's version) before
    # the row was tampered with; never what the tampered row holds
    assert "trap" not in source and all(r in (good, c.config) for r in rendered)


def test_shipped_file_for_another_model_with_the_same_slug_is_ignored(fresh_lookup, rng):
    twin = dataclasses.replace(H100, name="NVIDIA-H100 80GB HBM3")
    assert twin.slug == H100.slug
    (config,) = _configs(rng, count=1)
    _ship(fresh_lookup, twin, [(CLS, config, 1.0)])
    assert lookup.choose(H100, 4, CLS, store=None).source == "default"
    assert lookup.choose(twin, 4, CLS, store=None).source == "shipped"


def test_broken_shipped_file_warns_and_falls_through(fresh_lookup):
    (fresh_lookup / f"{H100.slug}.json").write_text('{"format": "autotranspose-tuning/1"')
    with pytest.warns(RuntimeWarning, match="ignoring shipped tuning file"):
        assert lookup.choose(H100, 4, CLS, store=None).source == "default"


def test_the_shipped_results_are_found_in_a_checkout():
    checkout = Path(__file__).resolve().parent.parent / "tuning_db"
    found = _REAL_TUNING_DB_DIR()
    assert found == (checkout if checkout.is_dir() else None)


@pytest.mark.parametrize(
    "path",
    sorted((Path(__file__).resolve().parent.parent / "tuning_db").glob("*.json")),
    ids=lambda p: p.stem,
)
def test_shipped_results_are_from_the_running_templates(path, monkeypatch):
    """A template edit makes the shipped results stale and lookup stops serving them: re-run
    dev/campaign.py on the device and commit the new file together with the edit."""
    monkeypatch.setattr(lookup, "tuning_db_dir", _REAL_TUNING_DB_DIR)
    tf = textio.load(path)
    assert tf.entries, f"{path.name} ships no entries"
    stale = [str(e.shape_class) for e in tf.entries if e.stale]
    assert not stale, f"{path.name}: stale entries {stale}; re-tune with dev/campaign.py"
    for e in tf.entries:
        if inplace_kind.parse_problem(e.problem) is not None:  # an in-place transpose's
            assert e.shape is not None and policy.inplace_problem(*e.shape[1:]) == e.problem
            choice = lookup.inplace_choice(tf.device.name, e.elem_bytes, *e.shape, store=None)
        elif e.problem:  # a cast-transpose's
            code, both = cast_kind.parse_problem(e.problem)
            choice = lookup.cast_choice(tf.device.name, code, e.shape_class, both=both, store=None)
        else:
            choice = lookup.choose(tf.device.name, e.elem_bytes, e.shape_class, store=None)
        assert choice.source == "shipped" and choice.config == e.config, e.shape_class


@pytest.mark.parametrize("elem_bytes", [1, 2, 4, 8, 16])
def test_untuned_unaligned_calls_get_a_kernel_for_any_offset(rng, elem_bytes):
    """Rows at odd offsets: the byte-permute kernel for 1- and 2-byte elements, the staged
    kernel for 4- and 8-byte ones (both keep 16-byte accesses at any offset); rows aligned to
    4 bytes or more keep the tiled default."""
    # sides past 256: a class of 256 rows or columns (from 201) is a tall or few-long-rows
    # class, which gets its own kernels (tall_rows, wide_rows; 3 in 3000 draws from 200 did)
    m, n = (int(rng.integers(300, 20000)) | 1 for _ in range(2))
    odd = shape_class(1, m, n, 1)
    c = lookup.choose("Some Untuned GPU", elem_bytes, odd, store=None)
    assert c.source == "default"
    prmt = prmt_default(elem_bytes) if elem_bytes in PRMT_SERVED else None
    want = prmt or staged_default(elem_bytes) or default_config(elem_bytes, max_vector=1)
    assert c.config == want and c.config.any_offset == (elem_bytes < 16)
    if elem_bytes == 2:  # rows of whole 4-byte words: the tiled kernels
        c = lookup.choose("Some Untuned GPU", 2, shape_class(1, m + 1, n + 1, 2), store=None)
        assert not c.config.any_offset


# --- first-call measurement support (neighbours, remember, is_guess) ------------------------------
def test_neighbours_are_the_nearest_usable_configs_tuned_and_shipped(store, rng, fresh_lookup):
    a, b, c, d = _configs(rng, count=4)
    near, mid, far = (
        ShapeClass(1, 4096, 8192, 4),
        ShapeClass(1, 2048, 2048, 4),
        ShapeClass(1, 256, 256, 4),
    )
    _ship(fresh_lookup, H100, [(mid, b, 900.0), (far, c, 800.0)])
    _record(store, H100, near, a, 1500.0)
    _record(store, H100, ShapeClass(1, 4096, 4096, 4), d, 1500.0, elem_bytes=4)
    got = lookup.neighbours(H100, 4, shape_class(1, 4096, 6000, 4), k=3, store=store)
    assert got[0] in (a, d) and set(got) <= {a, b, c, d} and len(got) == len(set(got)) == 3
    assert lookup.neighbours(H100, 4, CLS, k=1, store=store) == [d]  # its own class first
    # a class allowing no vector gets only configs that run at any offset
    assert all(
        cfg.vec == 1 or cfg.any_offset
        for cfg in lookup.neighbours(H100, 4, shape_class(1, 4099, 6007, 1), store=store)
    )
    assert lookup.neighbours(A100, 4, CLS, store=store) == []  # nothing for another GPU


@pytest.mark.parametrize(
    "source, own, guess",
    [
        ("tuned", True, False),
        ("measured", True, False),
        ("shipped", True, False),
        ("shipped", False, True),
        ("nearest", False, True),
        ("default", False, True),
    ],
)
def test_only_results_measured_for_the_class_itself_are_not_guesses(source, own, guess):
    other = ShapeClass(1, 256, 256, 4)
    c = lookup.Choice(default_config(4), source, CLS if own else other)
    assert policy.is_guess(c, CLS) is guess


def test_a_remembered_choice_serves_its_class_until_the_cache_is_cleared(
    rng, monkeypatch, tmp_path
):
    monkeypatch.setenv("AUTOTRANSPOSE_DB", str(tmp_path / "none.db"))
    (cfg,) = _configs(rng, count=1)
    cls = shape_class(1, 3000, 5000, 4)
    assert lookup.choose(H100, 4, cls).source == "default"
    lookup.remember(H100, 4, cls, False, lookup.Choice(cfg, "measured", cls, 3000.0))
    assert lookup.choose(H100, 4, cls) == lookup.Choice(cfg, "measured", cls, 3000.0)
    assert lookup.choose(H100, 4, shape_class(1, 3000, 9000, 4)).source == "default"
    lookup.clear_cache()
    assert lookup.choose(H100, 4, cls).source == "default"


def test_a_measured_result_serves_its_class_and_a_tuned_one_outranks_it(store, rng, fresh_lookup):
    """A first call's winner ("measured") serves exactly its class, ahead of a nearer class's
    tuned result; a tuned result of the class, in the database or shipped, comes first."""
    tuned, measured = _configs(rng, count=2)
    near = ShapeClass(1, 4096, 8192, 4)
    _record(store, H100, near, tuned, 1500.0)
    store.record(
        None, H100, "float32", 4, (1, 4096, 4096), CLS, measured, ok(2000.0, 0.0), source="measured"
    )
    c = lookup.choose(H100, 4, CLS, store=store)
    assert (c.source, c.config, c.shape_class, c.ratio) == ("measured", measured, CLS, 0.0)
    assert not policy.is_guess(c, CLS)
    assert lookup.choose(H100, 4, ShapeClass(1, 4096, 16384, 4), store=store).source == "nearest"
    # a shipped tuned result of exactly the class outranks it
    _ship(fresh_lookup, H100, [(CLS, tuned, 900.0)])
    lookup.clear_cache()
    c = lookup.choose(H100, 4, CLS, store=store)
    assert (c.source, c.config) == ("shipped", tuned)
    # and so does a tuned result in the database (it replaces the measured one)
    _record(store, H100, CLS, tuned, 100.0)
    c = lookup.choose(H100, 4, CLS, store=store)
    assert (c.source, c.config, c.gbps) == ("tuned", tuned, 100.0)


@pytest.mark.parametrize("shipped_gbps, raced", [(1000.0, True), (2300.0, True), (2500.0, False)])
def test_a_shipped_result_far_below_the_ceiling_is_raced_and_its_winner_serves(
    store, rng, fresh_lookup, shipped_gbps, raced
):
    """A shipped result that ran under 80% of copy (kernels came after it was tuned) is raced
    on a first call like a guess, and a first call's winner that ran faster serves the class
    after it; a shipped result near the ceiling still outranks a measured one."""
    from autotranspose.dispatch import transpose as dispatch

    shipped, winner = _configs(rng, count=2)
    _ship(fresh_lookup, H100, [(CLS, shipped, shipped_gbps)])  # copy 3000 GB/s: ratio gbps/3000
    c = lookup.choose(H100, 4, CLS, store=store)
    assert (c.source, c.config) == ("shipped", shipped)
    assert not policy.is_guess(c, CLS)  # its own class: a guess only by the ratio
    assert policy.far_below(c) is raced
    assert dispatch.policy.far_below is policy.far_below
    assert not policy.far_below(dataclasses.replace(c, source="tuned"))
    store.record(
        None, H100, "float32", 4, (1, 4096, 4096), CLS, winner, ok(2700.0), source="measured"
    )
    lookup.clear_cache()
    c = lookup.choose(H100, 4, CLS, store=store)
    assert (c.source, c.config) == (("measured", winner) if raced else ("shipped", shipped))


def test_few_rows_measured_on_other_rows_are_raced_again():
    """`other_rows`: a result measured on other few rows than the call's (fewer than 256, and
    than columns) is raced on the call's first call; the same rows, few columns, many rows or
    an unknown shape are not."""
    import random

    m = random.randint(3, 254)
    assert policy.other_rows((1, m + 1, 10**6), m, 10**6)
    assert policy.other_rows((7, m, 10**6), m + 1, 5 * 10**6)
    assert not policy.other_rows((3, m, 10**6), m, 2 * 10**6)  # the same rows, any batch or columns
    assert not policy.other_rows((1, 10**6, m + 1), 10**6, m)  # few columns
    assert not policy.other_rows((1, 300, 10**6), 400, 10**6)  # not few rows
    assert not policy.other_rows(None, m, 10**6)
    assert not policy.other_rows((1, m + 1, m), m, m)  # a square


def test_a_flat_byte_permute_result_is_not_the_nearest_for_rows_with_wide_vectors(
    store, fresh_lookup
):
    """A wide byte-permute result (tuned for few long odd rows) is not served to a nearby class
    whose rows allow 16-byte vectors (the tiled kernels win there); it still serves its own
    class and other unaligned ones."""
    from autotranspose.kernels.config import tall_default, wide_default

    wide, tall = wide_default(1, 20), tall_default(1, 20)
    _record(store, H100, ShapeClass(1, 32, 8388608, 1), wide, 2500.0, elem_bytes=1)
    _record(store, H100, ShapeClass(1, 8388608, 32, 1), tall, 2500.0, elem_bytes=1)
    for aligned in (ShapeClass(1, 32, 1048576, 16), ShapeClass(1, 1048576, 32, 16)):
        assert lookup.choose(H100, 1, aligned, store=store).source != "nearest"
    assert lookup.choose(H100, 1, ShapeClass(1, 32, 8388608, 1), store=store).config == wide
    # another unaligned class of few long rows: its own result or its default, the wide kernel
    near = lookup.choose(H100, 1, ShapeClass(1, 32, 4194304, 1), store=store).config
    assert near in (wide, wide_default(1, 32, exact=False)) and near.flag("wide")


@pytest.mark.parametrize("elem_bytes", [4, 8])
def test_few_long_rows_get_their_own_result_else_tiles_that_fit_not_the_nearest(
    store, fresh_lookup, rng, elem_bytes
):
    """Another class's result (its tiles taller than these rows: all edge) is not served to a
    class of few long rows in 8- or 16-byte words; the class's own result is, and without
    one the tiles that fit its fewest rows."""
    from autotranspose.dispatch.policy import few_rows_default
    from autotranspose.kernels.config import KernelConfig

    rows = int(rng.choice([64, 128, 256]))
    near, own = ShapeClass(1, rows * 2, 1048576, 2), ShapeClass(1, rows, 1048576, 2)
    tall = KernelConfig(elem_bytes, 128, 64, 2, 8)
    _record(store, H100, near, tall, 3000.0, elem_bytes=elem_bytes)
    got = lookup.choose(H100, elem_bytes, own, store=store)
    rule = few_rows_default(elem_bytes, rows // 2 + 1, 1048576 // 2 + 1, 2)
    assert rule is not None and got.config == rule and got.source == "default"
    assert got.config.tile_m <= rows // 2 + 1
    mine = KernelConfig(elem_bytes, 16, 64, 2, 4)
    _record(store, H100, own, mine, 2000.0, elem_bytes=elem_bytes)
    lookup.clear_cache()
    assert lookup.choose(H100, elem_bytes, own, store=store).config == mine


# --- permute_kernel: what serves a permute's pass ------------------------------------------------
def test_permute_kernel_of_a_transpose_pass_is_lookups_choice_for_its_class():
    from autotranspose.kernels.shapes import pass_vec
    from autotranspose.plans.permute import plan_permute

    plan = plan_permute((64, 256, 56, 56), (0, 2, 3, 1), 4)
    assert lookup.chooses_per_device(plan)
    got = lookup.permute_kernel(plan, H100.name, store=None)
    p = plan.passes[0]
    cls = shape_class(p.batch, p.m, p.n, pass_vec(p))
    want = lookup.choose(H100.name, 4, cls, store=None)
    assert (got.pass_, got.shape_class, got.choice, got.kernel) == (p, cls, want, want.config.key)
    assert got.kernel in got.source()
    with pytest.raises(ValueError, match="give device"):
        lookup.permute_kernel(plan)


@pytest.mark.parametrize(
    ("shape", "axes", "elem_bytes", "kernel", "in_source"),
    [
        ((8, 4096, 32, 128), (0, 2, 1, 3), 2, "rows", "__global__"),  # a row copy
        ((2, 7, 3, 5, 11), (0, 2, 1, 4, 3), 4, "packed", "__global__"),
        ((16, 109, 120, 4), (0, 3, 1, 2), 1, "at_vbox", "__global__"),  # a vector box
        ((16, 3, 14, 16, 14, 16), (0, 2, 4, 3, 5, 1), 2, "at_vbox", "__global__"),
        ((2,) * 8, (7, 6, 5, 4, 3, 2, 1, 0), 4, "gather", "__global__"),
        ((3, 1, 5), (1, 0, 2), 4, "cuMemcpyDtoDAsync", None),  # an identity in memory
        ((3, 0, 5), (2, 1, 0), 4, "none", None),
    ],  # an empty array: no pass
)
def test_permute_kernel_of_another_pass_needs_no_device(shape, axes, elem_bytes, kernel, in_source):
    from autotranspose.plans.permute import plan_permute

    plan = plan_permute(shape, axes, elem_bytes)
    assert not lookup.chooses_per_device(plan)
    got = lookup.permute_kernel(plan)
    assert got.choice is None and got.shape_class is None
    assert kernel in got.kernel or got.kernel == kernel, got.kernel
    source = got.source()
    assert (source == "") if in_source is None else (in_source in source and got.kernel in source)
