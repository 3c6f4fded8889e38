"""The tuning database: schema, URLs, foreign databases, record/best semantics, bad rows."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from store_data import A100, H100, ok, random_config, sample_shape, valid_config

from autotranspose.errors import ForeignDatabaseError, StoreError
from autotranspose.kernels.config import flat_default
from autotranspose.kernels.shapes import ShapeClass, shape_class
from autotranspose.store import (
    BadRowWarning,
    Store,
    hooks,
    migrations,
    resolve_url,
    upgrade,
    urls,
    writes,
)
from autotranspose.store.measurement import Measurement
from autotranspose.store.models import Base

pytest_plugins = ("store_fixtures",)
pytestmark = pytest.mark.usefixtures("isolated_home")

AT_TABLES = {
    "at_meta",
    "at_devices",
    "at_configs",
    "at_runs",
    "at_measurements",
    "at_best",
    "at_claims",
    "at_alembic_version",
}


# --- schema ------------------------------------------------------------------------------------
def test_open_creates_schema_at_head(store):
    with store.engine.connect() as conn:
        tables = set(sa.inspect(conn).get_table_names())
    assert tables == AT_TABLES
    assert store.schema_revision() == migrations.head() == "0006"


def test_models_match_migrations(store):
    """The head revision builds exactly the tables the models declare (autogenerate: no diff)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn,
            opts={
                "version_table": migrations.VERSION_TABLE,
                "include_name": lambda name, type_, _: type_ != "table" or name.startswith("at_"),
            },
        )
        assert compare_metadata(ctx, Base.metadata) == []


def test_reopen_is_idempotent(db_url):
    for _ in range(3):
        with Store.open(db_url) as s:
            s.upsert_device(H100)
    with Store.open(db_url) as s:
        assert s.devices() == [H100]


def test_sqlite_wal_and_busy_timeout(tmp_path):
    with Store.open(tmp_path / "t.db") as s, s.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_upgrade_function_creates_and_reports(db_url):
    assert upgrade(db_url) == migrations.head()
    assert upgrade(db_url) == migrations.head()  # already there: nothing to do


def test_sqlite_in_memory_works():
    with Store.open("sqlite://") as s:
        s.upsert_device(H100)
        assert s.devices() == [H100]


# --- where the database is -------------------------------------------------------------------------
def test_resolve_url_explicit_path_env_and_default(tmp_path, monkeypatch, isolated_home):
    assert resolve_url() == f"sqlite:///{isolated_home}"
    monkeypatch.setenv("AUTOTRANSPOSE_DB", str(tmp_path / "env.db"))
    assert resolve_url() == f"sqlite:///{tmp_path / 'env.db'}"
    assert resolve_url(tmp_path / "x.db") == f"sqlite:///{tmp_path / 'x.db'}"
    monkeypatch.chdir(tmp_path)
    assert resolve_url("rel.db") == f"sqlite:///{tmp_path / 'rel.db'}"
    pg = "postgresql+psycopg://u:secret@db.example:5432/tuning"
    assert resolve_url(pg) == pg


def test_bad_url_is_a_store_error():
    with pytest.raises(StoreError, match="not a database URL"):
        resolve_url("nonsense://a:b:c:d")


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_path_is_refused_not_read_as_the_current_directory(empty, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match=r"names no tuning database.*file path.*or a URL"):
        Store.open(empty)
    monkeypatch.setenv("AUTOTRANSPOSE_DB", empty)
    if empty:  # set but blank: refused, naming the variable
        with pytest.raises(StoreError, match=r"AUTOTRANSPOSE_DB=.*unset it"):
            resolve_url()
    else:  # empty: unset, as the shell's `AUTOTRANSPOSE_DB= cmd` means
        assert resolve_url() == urls.sqlite_url(urls.default_path())
    assert list(tmp_path.iterdir()) == []


def test_default_database_goes_to_the_user_data_dir(isolated_home):
    assert not isolated_home.parent.exists()
    with Store.open() as s:
        s.upsert_device(H100)
    assert isolated_home.is_file()


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        Store.open(tmp_path / "no" / "such" / "dir" / "t.db")


def test_unreachable_postgres_is_a_store_error():
    with pytest.raises(StoreError, match="cannot open the tuning database"):
        Store.open("postgresql+psycopg://nobody@127.0.0.1:1/nothing?connect_timeout=2")


# --- foreign databases -------------------------------------------------------------------------------
def test_sqlite_with_unrelated_tables_is_foreign(tmp_path):
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('alice')")
    with pytest.raises(ForeignDatabaseError) as info:
        Store.open(path)
    message = str(info.value)
    assert "is not an autotranspose tuning database" in message
    assert "users" in message and "AUTOTRANSPOSE_DB" in message and str(path) in message
    with sqlite3.connect(path) as conn:  # left untouched
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"users"}


@pytest.mark.postgres
def test_postgres_with_unrelated_tables_is_foreign(pg_url):
    engine = sa.create_engine(pg_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE users (id serial PRIMARY KEY)")
    engine.dispose()
    with pytest.raises(ForeignDatabaseError, match="users"):
        Store.open(pg_url)


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\x01random bytes\xff" * 100,
        b"name,value\n1,2\n",
        b"SQLite format 3\x00" + b"\xab" * 4000,
    ],
    ids=["random-bytes", "csv-text", "corrupt-sqlite"],
)
def test_non_database_file_is_foreign(tmp_path, content, rng):
    path = tmp_path / "x.db"
    path.write_bytes(content + rng.bytes(int(rng.integers(0, 64))))
    with pytest.raises(ForeignDatabaseError, match="is not an autotranspose tuning database"):
        Store.open(path)
    assert path.read_bytes().startswith(content)  # not overwritten


def test_wrong_marker_is_foreign(tmp_path):
    path = tmp_path / "t.db"
    Store.open(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE at_meta SET value = 'someone-else' WHERE key = 'application'")
    with pytest.raises(ForeignDatabaseError, match="marker"):
        Store.open(path)


def test_newer_schema_asks_to_upgrade_autotranspose(tmp_path):
    path = tmp_path / "t.db"
    Store.open(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE at_alembic_version SET version_num = '9999'")
    with pytest.raises(StoreError, match="upgrade autotranspose"):
        Store.open(path)


@pytest.mark.parametrize("first", ["optuna", "autotranspose"])
def test_shares_the_database_with_optuna(db_url, first):
    """Optuna's tables and its alembic_version live beside ours; either may come first."""
    import optuna

    url = resolve_url(db_url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def optuna_side() -> None:
        study = optuna.create_study(storage=url, study_name="s", load_if_exists=True)
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)

    if first == "optuna":
        optuna_side()
    with Store.open(db_url) as s:
        s.upsert_device(H100)
    if first == "autotranspose":
        optuna_side()
    with Store.open(db_url) as s:
        assert s.devices() == [H100]
        assert s.schema_revision() == migrations.head()
        with s.engine.connect() as conn:
            tables = set(sa.inspect(conn).get_table_names())
            optuna_rev = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    assert {"studies", "trials", "alembic_version"} <= tables and AT_TABLES <= tables
    assert optuna_rev and not optuna_rev.startswith("000")
    assert len(optuna.load_study(study_name="s", storage=url).trials) >= 2


# --- record and best ---------------------------------------------------------------------------------
@pytest.fixture(params=["native", "generic"])
def upsert(request, monkeypatch):
    """Run with the dialect's ON CONFLICT upserts, and with the portable SELECT FOR UPDATE path."""
    if request.param == "generic":
        monkeypatch.setattr(writes, "on_conflict_insert", lambda conn: None)
    return request.param


def test_better_replaces_worse_does_not(store, rng, upsert):
    shape, cls = sample_shape(rng)
    speeds = rng.uniform(100, 3000, size=12)
    configs = [random_config(rng, 4, cls.vec) for _ in speeds]
    run = store.begin_run(H100, {"seed": 1})
    for config, gbps in zip(configs, speeds, strict=True):
        store.record(run, H100, "float32", 4, shape, cls, config, ok(float(gbps)))
    best = store.best(H100.name, 4, cls)
    i = int(speeds.argmax())
    assert best is not None and best.gbps == pytest.approx(speeds[i])
    assert best.config == configs[i] and best.shape == shape and best.dtype == "float32"
    assert best.ratio == pytest.approx(speeds[i] / 3000.0) and not best.stale
    store.record(run, H100, "float32", 4, shape, cls, configs[0], ok(float(speeds[i])))  # a tie
    assert store.best(H100.name, 4, cls).config == configs[i]


@pytest.mark.parametrize("status", ["fail", "wrong"])
def test_fail_and_wrong_are_never_best(store, rng, status, upsert):
    shape, cls = sample_shape(rng)
    run = store.begin_run(H100, {})
    bad = Measurement(status, 1e6, 3000.0, error="boom" if status == "fail" else None)
    store.record(run, H100, "float32", 4, shape, cls, random_config(rng, 4, cls.vec), bad)
    assert store.best(H100.name, 4, cls) is None
    store.record(run, H100, "float32", 4, shape, cls, random_config(rng, 4, cls.vec), ok(500.0))
    store.record(run, H100, "float32", 4, shape, cls, random_config(rng, 4, cls.vec), bad)
    assert store.best(H100.name, 4, cls).gbps == 500.0


def test_stale_best_is_replaced_even_by_a_slower_result(store, rng, template_version, upsert):
    shape, cls = sample_shape(rng)
    run = store.begin_run(H100, {})
    template_version("0ld0ld0ld0ld0ld0")
    store.record(run, H100, "float32", 4, shape, cls, random_config(rng, 4, cls.vec), ok(2900.0))
    template_version()  # the code changed: the stored best is stale now
    assert store.best(H100.name, 4, cls) is None
    (entry,) = store.entries(H100.name)
    assert entry.stale and entry.template_version == "0ld0ld0ld0ld0ld0"
    assert store.entries(H100.name, include_stale=False) == []
    config = random_config(rng, 4, cls.vec)
    store.record(run, H100, "float32", 4, shape, cls, config, ok(100.0))
    best = store.best(H100.name, 4, cls)
    assert best.gbps == 100.0 and best.config == config and not best.stale


@pytest.fixture
def edited_templates(tmp_path, monkeypatch):
    """Call with (template file, text to add inside its kernel loop) to pretend the running
    code's templates were edited there; the real templates are untouched."""
    from autotranspose.kernels import codegen

    work = tmp_path / "templates"
    shutil.copytree(codegen.template_dir(), work)

    def edit(name: str, line: str) -> None:
        path = work / name
        text = path.read_text()
        loop = re.search(r"\{%- for k in kernels %\}[^\n]*\n", text)  # the loop's first line
        assert loop, f"{name} has no kernel loop to edit"
        path.write_text(text[: loop.end()] + line + "\n" + text[loop.end() :])
        monkeypatch.setattr(codegen, "template_dir", lambda: work)
        codegen._environment.cache_clear()
        codegen.kernel_version.cache_clear()

    yield edit
    codegen._environment.cache_clear()
    codegen.kernel_version.cache_clear()


def test_results_survive_edits_to_other_kernels(store, rng, edited_templates):
    """A result is versioned by its own kernel's source: editing the flat kernels' template
    leaves tiled results current, and makes flat results stale (and replaceable)."""
    tiled_shape, tiled_cls = sample_shape(rng)
    tiled = random_config(rng, 4, tiled_cls.vec)
    while tiled.kind == "direct":  # a tiled kernel's (templates/tiled/), not the direct kind's
        tiled = random_config(rng, 4, tiled_cls.vec)
    flat = flat_default(4, 20)
    flat_shape = (1, int(rng.integers(100_000, 2_000_000)), 20)
    flat_cls = shape_class(*flat_shape, 4)
    run = store.begin_run(H100, {})
    store.record(run, H100, "float32", 4, tiled_shape, tiled_cls, tiled, ok(2000.0))
    store.record(run, H100, "float32", 4, flat_shape, flat_cls, flat, ok(1500.0))
    edited_templates("flat/flat.cu.j2", "// an edit to the flat kernels only")
    assert store.best(H100.name, 4, tiled_cls).config == tiled  # still current: still served
    assert store.best(H100.name, 4, flat_cls) is None
    assert {e.config.spans_short_side: e.stale for e in store.entries(H100.name)} == {
        False: False,
        True: True,
    }
    store.record(run, H100, "float32", 4, flat_shape, flat_cls, flat, ok(900.0))  # re-measured
    assert store.best(H100.name, 4, flat_cls).gbps == 900.0  # slower, but current: replaces
    edited_templates("tiled/tiled.cu.j2", "// an edit to the tiled kernels")
    assert store.best(H100.name, 4, tiled_cls) is None
    assert store.best(H100.name, 4, flat_cls).gbps == 900.0


def test_keys_are_separate(store, rng):
    """Best is per (device, element size, shape class)."""
    shape, cls = sample_shape(rng)
    run = store.begin_run(H100, {})
    store.record(run, H100, "float32", 4, shape, cls, random_config(rng, 4, cls.vec), ok(100.0))
    store.record(run, A100, "float32", 4, shape, cls, random_config(rng, 4, cls.vec), ok(900.0))
    store.record(run, H100, "float16", 2, shape, cls, random_config(rng, 2, cls.vec), ok(800.0))
    b, m, n = shape
    other = shape_class(b * 16, m, n, cls.vec)
    store.record(
        run, H100, "float32", 4, (b * 16, m, n), other, random_config(rng, 4, cls.vec), ok(700.0)
    )
    assert store.best(H100.name, 4, cls).gbps == 100.0
    assert store.best(A100.name, 4, cls).gbps == 900.0
    assert store.best(H100.name, 2, cls).gbps == 800.0
    assert store.best(H100.name, 4, other).gbps == 700.0
    assert len(store.entries()) == 4 and len(store.entries(H100.name)) == 3
    assert len(store.entries(H100.name, elem_bytes=4)) == 2
    assert sorted(d.name for d in store.devices()) == sorted([H100.name, A100.name])


def test_device_is_refreshed(store):
    store.upsert_device(H100)
    newer = H100.__class__(
        **{**H100.to_dict(), "compute_capability": (9, 0), "driver_version": 12080}
    )
    store.upsert_device(newer)
    assert store.devices() == [newer]


def test_runs_begin_and_finish(store):
    run = store.begin_run(H100, {"trials": 10, "path": Path("/x")})
    store.finish_run(run, "done")
    with store.engine.connect() as conn:
        row = conn.exec_driver_sql(
            f"SELECT status, finished_at, settings_json, tool_version, template_version FROM at_runs WHERE id = {run}"
        ).one()
    assert row[0] == "done" and row[1] is not None
    assert json.loads(row[2]) == {"trials": 10, "path": "/x"}
    with pytest.raises(StoreError, match="no tuning run"):
        store.finish_run(run + 1000, "done")
    with pytest.raises(StoreError, match="run status"):
        store.finish_run(run, "exploded")


@pytest.mark.parametrize(
    "change, match",
    [
        ({"shape": (1, 100, 100)}, "not in class"),
        ({"config": valid_config(4, 4)}, "wider than class"),
        ({"config": valid_config(2, 2)}, "2-byte elements"),
        ({"dtype": "float32; DROP TABLE at_best"}, "dtype"),
        ({"shape": (1, 0, 8)}, "positive ints"),
    ],
)
def test_record_refuses_inconsistent_results(store, change, match):
    cls = ShapeClass(1, 1024, 1024, 2)
    args = {"dtype": "float32", "shape": (1, 1000, 1000), "config": valid_config(4, 2)}
    args.update(change)
    with pytest.raises(StoreError, match=match):
        store.record(None, H100, args["dtype"], 4, args["shape"], cls, args["config"], ok(1.0))


# --- resume ------------------------------------------------------------------------------------------
def test_measured_answers_the_resume_question(store, rng, template_version):
    shape, cls = sample_shape(rng)
    config, other = random_config(rng, 4, cls.vec), random_config(rng, 4, cls.vec)
    assert store.measured(H100.name, 4, shape, config) is None
    run = store.begin_run(H100, {})
    store.record(run, H100, "float32", 4, shape, cls, config, Measurement("fail", error="nvcc: no"))
    got = store.measured(H100.name, 4, shape, config)
    assert got.status == "fail" and got.error == "nvcc: no" and math.isinf(got.time_us)
    store.record(run, H100, "float32", 4, shape, cls, config, ok(1234.5))
    assert store.measured(H100.name, 4, shape, config) == ok(1234.5)  # the latest
    b, m, n = shape
    assert store.measured(H100.name, 4, (b, m, n + cls.vec), config) is None  # same class
    if other != config:
        assert store.measured(H100.name, 4, shape, other) is None
    assert store.measured(A100.name, 4, shape, config) is None
    template_version("5ca1ab1e5ca1ab1e")  # new kernels: old measurements do not count
    assert store.measured(H100.name, 4, shape, config) is None


# --- claims --------------------------------------------------------------------------------------
def test_claims_are_exclusive_until_released(store):
    assert store.claim("study", "1x64x64:k", "trial-1")
    assert store.claim("study", "1x64x64:k", "trial-1")  # holding it already
    assert not store.claim("study", "1x64x64:k", "trial-2")
    assert store.claim("other-study", "1x64x64:k", "trial-2")
    assert not store.release("study", "1x64x64:k", "trial-2")  # not its claim
    assert store.release("study", "1x64x64:k", "trial-1")
    assert store.claim("study", "1x64x64:k", "trial-2")


# --- bad rows ----------------------------------------------------------------------------------------
MALICIOUS_CONFIGS = [
    '{"elem_bytes": 4, "tile_m": "32; system(\\"rm -rf /\\")"}',
    '{"elem_bytes": 4, "tile_m": 32, "evil": "__import__(\'os\')"}',
    '{"elem_bytes": 4, "tile_m": 100000000000000000000000000000000000000}',
    '{"elem_bytes": 4, "layout": "pad\\"); asm(\\"trap;"}',
    '{"elem_bytes": 4, "tile_m": NaN}',
    "[" * 100000,
    '{"elem_bytes": 4, "tile_m": 32',
    '{"elem_bytes": 8, "tile_m": 32}',  # not the row's element size
    "x" * 10000,
]


def _insert_best(
    store, *, config_json=None, shape_class="1x1024x1024/v4", device=H100, gbps=1.0, tv=None
):
    """A best row written with raw SQL, as a tampered or damaged database would hold it."""
    device_id = store.upsert_device(device)
    tv = tv or hooks.kernel_version(valid_config(4, 4))
    config_json = config_json or json.dumps(valid_config(4, 4).to_dict())
    with store.engine.begin() as conn:
        key = f"raw{conn.exec_driver_sql('SELECT COUNT(*) FROM at_configs').scalar()}"
        conn.execute(
            sa.text("INSERT INTO at_configs (key, elem_bytes, config_json) VALUES (:k, 4, :j)"),
            {"k": key, "j": config_json},
        )
        config_id = conn.execute(
            sa.text("SELECT id FROM at_configs WHERE key = :k"), {"k": key}
        ).scalar()
        conn.execute(
            sa.text(
                "INSERT INTO at_best (device_id, elem_bytes, shape_class, config_id, gbps, copy_gbps,"
                " ratio, template_version, updated_at) VALUES (:d, 4, :c, :cfg, :g, 1.0, 1.0, :tv, :at)"
            ),
            {
                "d": device_id,
                "c": shape_class,
                "cfg": config_id,
                "g": gbps,
                "tv": tv,
                "at": writes.now(),
            },
        )
        return conn.execute(sa.text("SELECT MAX(id) FROM at_best")).scalar()


@pytest.mark.parametrize("config_json", MALICIOUS_CONFIGS, ids=lambda j: j[:24])
def test_malicious_config_rows_are_skipped_and_named(store, config_json, monkeypatch):
    rendered = []
    from autotranspose.kernels import codegen

    real = codegen.kernel_params
    monkeypatch.setattr(codegen, "kernel_params", lambda c: rendered.append(c) or real(c))
    codegen.kernel_version.cache_clear()
    row_id = _insert_best(store, config_json=config_json)
    good_id = _insert_best(store, shape_class="1x2048x2048/v4")
    with pytest.warns(BadRowWarning, match=f"at_best row {row_id}"):
        entries = store.entries()
    assert [e.shape_class for e in entries] == [ShapeClass(1, 2048, 2048, 4)]
    (problem,) = store.problems()
    assert (problem.table, problem.row_id) == ("at_best", row_id) and good_id != row_id
    with pytest.raises(StoreError, match=f"at_best row {row_id}"):
        store.best(H100.name, 4, ShapeClass(1, 1024, 1024, 4))
    # only the validated good config reached a template (to compute its kernel's version)
    assert rendered and all(c == valid_config(4, 4) for c in rendered)


@pytest.mark.parametrize(
    "shape_class",
    [
        "1x2x3/v4;DROP TABLE at_best",
        "{{ 7*7 }}",
        "1x1024x1024/v32",
        "1x1024x1024",
        "-1x2x2/v1",
        "1x" + "9" * 50 + "x2/v1",
    ],
    ids=lambda c: c[:24],
)
def test_malicious_shape_class_rows_are_skipped(store, shape_class):
    row_id = _insert_best(store, shape_class=shape_class)
    with pytest.warns(BadRowWarning, match=f"at_best row {row_id}"):
        assert store.entries() == []
    assert [p.row_id for p in store.problems()] == [row_id]


def test_bad_numbers_and_versions_are_skipped(store):
    ids = [
        _insert_best(store, gbps=-5.0, shape_class="1x16x16/v4"),
        _insert_best(store, tv="<script>", shape_class="1x32x32/v4"),
        _insert_best(store, gbps=float("inf"), shape_class="1x64x64/v4"),
    ]
    with pytest.warns(BadRowWarning):
        assert store.entries() == []
    assert sorted(p.row_id for p in store.problems()) == sorted(ids)


@pytest.mark.parametrize(
    ("column", "value", "says"),
    [
        ("gbps", 1e308, "gbps 1e+308 is outside"),
        ("copy_gbps", 5e6, "copy_gbps 5000000.0 is outside"),
        ("ratio", 0.25, "is not gbps / copy_gbps"),
    ],
)
def test_numbers_beyond_any_gpu_are_skipped_like_an_import_and_replaced(store, column, value, says):
    """A stored row is as untrusted as a file: numbers an import refuses are never served; the
    warning names the row and what to do, and the next valid result takes its place."""
    cls = ShapeClass(1, 1024, 1024, 4)
    config = valid_config(4, 4)
    store.record(None, H100, "float32", 4, (1, 1024, 1024), cls, config, ok(2000.0))
    with store.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE at_best SET {column} = :v"), {"v": value})
        row_id = conn.execute(sa.text("SELECT id FROM at_best")).scalar_one()
    with pytest.warns(BadRowWarning) as caught:
        assert store.entries() == []
    (message,) = [str(w.message) for w in caught]
    assert f"at_best row {row_id}" in message and says in message
    assert (
        "tune its class again" in message and f"DELETE FROM at_best WHERE id = {row_id}" in message
    )
    with pytest.raises(StoreError, match=f"at_best row {row_id}.*DELETE FROM at_best"):
        store.best(H100.name, 4, cls)
    # nothing deleted behind the user's back; a slower valid result replaces the bad best
    assert store.record(None, H100, "float32", 4, (1, 1024, 1024), cls, config, ok(1500.0))
    (entry,) = store.entries()
    assert entry.gbps == 1500.0 and entry.ratio == pytest.approx(0.5)


def test_an_import_replaces_a_best_beyond_any_gpu(store, tmp_path):
    from autotranspose.store import textio

    cls = ShapeClass(1, 1024, 1024, 4)
    with Store.open("sqlite://") as scratch:
        scratch.record(
            None, H100, "float32", 4, (1, 1024, 1024), cls, valid_config(4, 4), ok(1800.0)
        )
        doc = textio.export(scratch)
    store.record(None, H100, "float32", 4, (1, 1024, 1024), cls, valid_config(4, 4), ok(2000.0))
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE at_best SET gbps = 1e308"))
    textio.import_into(store, doc)
    assert [e.gbps for e in store.entries()] == [1800.0]


def test_a_device_row_beyond_any_gpu_is_skipped(store):
    store.upsert_device(H100)
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE at_devices SET multiprocessors = 1000000"))
    with pytest.warns(BadRowWarning, match="multiprocessors 1000000 is outside.*import its tuning"):
        assert store.devices() == []
    store.upsert_device(H100)  # tuning on that GPU rewrites the row
    assert store.devices() == [H100]


def test_a_measurement_beyond_any_gpu_is_never_reused(store):
    cls = ShapeClass(1, 1024, 1024, 4)
    config = valid_config(4, 4)
    store.record(None, H100, "float32", 4, (1, 1024, 1024), cls, config, ok(2000.0))
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE at_measurements SET gbps = 1e308"))
        row_id = conn.execute(sa.text("SELECT id FROM at_measurements")).scalar_one()
    with pytest.raises(
        StoreError,
        match=f"at_measurements row {row_id}: gbps 1e\\+308 is outside.*DELETE FROM at_measurements WHERE id = {row_id}",
    ):
        store.measured(H100.name, 4, (1, 1024, 1024), config)


def test_sqlite_type_confusion_is_skipped(tmp_path):
    """SQLite stores anything in any column: text in numbers, garbage in timestamps."""
    with Store.open(tmp_path / "t.db") as store:
        row_id = _insert_best(store)
        with store.engine.begin() as conn:
            conn.exec_driver_sql(
                f"UPDATE at_best SET gbps = 'fast', updated_at = 'soon' WHERE id = {row_id}"
            )
        good = _insert_best(store, shape_class="1x64x64/v4")
        with store.engine.begin() as conn:
            conn.exec_driver_sql(f"UPDATE at_best SET updated_at = 'not a date' WHERE id = {good}")
        with pytest.warns(BadRowWarning):
            assert store.entries() == []
        assert {p.row_id for p in store.problems()} == {row_id, good}


def test_malicious_device_rows_are_skipped(store):
    store.upsert_device(H100)
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO at_devices (name, cc_major, cc_minor, multiprocessors, memory_clock_khz,"
                " bus_width_bits, l2_bytes, driver_version, cuda_version, max_threads_per_block,"
                " max_shared_per_block, updated_at) VALUES (:n, 9, 0, 1, 1, 1, 1, 1, 1, 1024, 1, :at)"
            ),
            {"n": 'GPU"; rm -rf / #', "at": writes.now()},
        )
    with pytest.warns(BadRowWarning, match="at_devices row"):
        assert store.devices() == [H100]
    assert [p.table for p in store.problems()] == ["at_devices"]


def test_killed_writer_loses_at_most_the_write_in_flight(tmp_path):
    """SIGKILL a process in the middle of writing: the file stays consistent."""
    import multiprocessing
    import signal
    import time

    from store_data import write_forever

    path = tmp_path / "t.db"
    Store.open(path).close()
    ctx = multiprocessing.get_context("spawn")
    # no lock: a writer killed while holding the Value's lock would leave every read here
    # blocked for good; the writer alone stores to it, a whole int at a time
    progress = ctx.Value("i", 0, lock=False)
    proc = ctx.Process(target=write_forever, args=(str(path), progress))
    proc.start()
    deadline = time.monotonic() + 60
    while progress.value < 30 and time.monotonic() < deadline and proc.is_alive():
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    assert progress.value >= 30
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        count, top = conn.execute(
            "SELECT COUNT(*), MAX(gbps) FROM at_measurements WHERE status = 'ok'"
        ).fetchone()
    assert count >= progress.value  # every finished write survived
    with Store.open(path) as s:
        (best,) = s.entries()
        assert best.gbps == top  # and best agrees with the measurements


def test_realigning_configs_serve_classes_narrower_than_their_vector(store):
    """A realigning kernel uses vec-wide words on any alignment, so it is a valid best for a
    class whose rows allow only vec=1 (4099x6007 float32), and lookup serves it there."""
    from autotranspose.dispatch import lookup
    from autotranspose.kernels.config import KernelConfig
    from autotranspose.kernels.shapes import shape_class
    from autotranspose.runtime.device import DeviceInfo

    dev = DeviceInfo("NVIDIA Test GPU", (9, 0), 132)
    cls = shape_class(1, 4099, 6007, 1)
    cfg = KernelConfig(4, 64, 64, 4, 1, realign=True)
    run = store.begin_run(dev, {})
    store.record(run, dev, "float32", 4, (1, 4099, 6007), cls, cfg, ok(2500.0))
    assert store.best(dev.name, 4, cls).config == cfg
    assert lookup.choose(dev, 4, cls, store=store).config == cfg
