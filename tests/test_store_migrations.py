"""Schema upgrades: a database made by an older autotranspose is upgraded with its rows intact."""

from __future__ import annotations

import hashlib
import io
import json

import pytest
import sqlalchemy as sa
from alembic import command
from store_data import H100, valid_config

from autotranspose import cli
from autotranspose.dispatch import lookup
from autotranspose.errors import StoreError
from autotranspose.kernels.shapes import Layout, ShapeClass
from autotranspose.store import Store, hooks, migrations, resolve_url, sqlite_path, upgrade, writes
from autotranspose.store.measurement import Measurement

pytest_plugins = ("store_fixtures",)
pytestmark = pytest.mark.usefixtures("isolated_home")


def _columns(url: str, table: str) -> set[str]:
    engine = sa.create_engine(resolve_url(url))
    try:
        with engine.connect() as conn:
            return {c["name"] for c in sa.inspect(conn).get_columns(table)}
    finally:
        engine.dispose()


def _fill_revision_0001(url: str, rng) -> dict:
    """Rows as autotranspose with schema 0001 wrote them (raw SQL: no current models)."""
    config = valid_config(4, 4)
    gbps = float(rng.uniform(500, 3000))
    tv = hooks.kernel_version(config)
    now = writes.now()
    engine = sa.create_engine(resolve_url(url))
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO at_devices (name, cc_major, cc_minor, multiprocessors,"
                " memory_clock_khz, bus_width_bits, driver_version, cuda_version,"
                " max_threads_per_block, max_shared_per_block, updated_at)"
                " VALUES (:name, 9, 0, 132, 2619000, 5120, 12040, 12040, 1024, 49152, :now)"
            ),
            {"name": H100.name, "now": now},
        )
        conn.execute(
            sa.text("INSERT INTO at_configs (key, elem_bytes, config_json) VALUES (:k, 4, :j)"),
            {"k": config.key, "j": json.dumps(config.to_dict())},
        )
        conn.execute(
            sa.text(
                "INSERT INTO at_runs (device_id, started_at, finished_at, tool_version,"
                " template_version, settings_json, status)"
                " VALUES (1, :now, :now, '0.0.1', :tv, '{}', 'done')"
            ),
            {"now": now, "tv": tv},
        )
        conn.execute(
            sa.text(
                "INSERT INTO at_measurements (run_id, device_id, config_id, dtype, elem_bytes,"
                " batch, m, n, shape_class, status, gbps, copy_gbps, time_us, error,"
                " template_version, created_at) VALUES (1, 1, 1, 'float32', 4, 1, 4096, 4096,"
                " '1x4096x4096/v4', 'ok', :g, 3000.0, 44.7, NULL, :tv, :now)"
            ),
            {"g": gbps, "tv": tv, "now": now},
        )
        conn.execute(
            sa.text(
                "INSERT INTO at_best (device_id, elem_bytes, shape_class, config_id,"
                " measurement_id, gbps, copy_gbps, ratio, template_version, updated_at)"
                " VALUES (1, 4, '1x4096x4096/v4', 1, 1, :g, 3000.0, :r, :tv, :now)"
            ),
            {"g": gbps, "r": gbps / 3000.0, "tv": tv, "now": now},
        )
    engine.dispose()
    return {"config": config, "gbps": gbps}


def test_revision_0001_database_is_upgraded_with_rows_intact(db_url, rng):
    assert upgrade(db_url, revision="0001") == "0001"
    assert "l2_bytes" not in _columns(db_url, "at_devices")
    old = _fill_revision_0001(db_url, rng)

    with Store.open(db_url) as store:  # upgrades implicitly
        assert store.schema_revision() == migrations.head()
        (device,) = store.devices()
        assert device.name == H100.name and device.l2_bytes == 0  # unknown before 0002
        (entry,) = store.entries()
        assert entry.config == old["config"] and entry.gbps == pytest.approx(old["gbps"])
        assert entry.shape_class == ShapeClass(1, 4096, 4096, 4) and not entry.stale
        assert entry.source == "tuned"  # every result before 0004 was tuned or imported
        got = store.measured(H100.name, 4, (1, 4096, 4096), old["config"])
        assert got is not None and got.gbps == pytest.approx(old["gbps"])
        assert store.claim("study", "key", "me")  # the 0003 table exists
        store.upsert_device(H100)  # and the 0002 column takes values
        assert store.devices() == [H100]
    assert "l2_bytes" in _columns(db_url, "at_devices")


def test_explicit_upgrade_goes_one_revision_at_a_time(db_url):
    assert upgrade(db_url, revision="0001") == "0001"
    assert upgrade(db_url, revision="0002") == "0002"
    assert "l2_bytes" in _columns(db_url, "at_devices")
    assert "at_claims" not in _tables(db_url)
    assert upgrade(db_url) == migrations.head()
    assert "at_claims" in _tables(db_url)
    assert "source" in _columns(db_url, "at_best") and "source" in _columns(
        db_url, "at_measurements"
    )


def test_revision_0004_downgrades_and_upgrades_with_sources_intact(db_url):
    """The source column goes and comes back (every row then reads "tuned" again)."""
    cls = ShapeClass(1, 4096, 4096, 4)
    with Store.open(db_url) as store:
        store.record(
            None,
            H100,
            "float32",
            4,
            (1, 4096, 4096),
            cls,
            valid_config(4, 4),
            Measurement("ok", 2000.0, 0.0, 10.0),
            source="measured",
        )
        assert [e.source for e in store.entries()] == ["measured"]
    engine = sa.create_engine(resolve_url(db_url))
    try:
        with engine.begin() as conn:
            command.downgrade(migrations.alembic_config(conn), "0003")
    finally:
        engine.dispose()
    assert "source" not in _columns(db_url, "at_best")
    with Store.open(db_url, readonly=True) as store:
        assert [e.source for e in store.entries()] == ["tuned"]
    assert upgrade(db_url) == migrations.head()
    assert "source" in _columns(db_url, "at_best")


def test_revision_0005_keeps_layouts_apart_and_reads_older_rows_as_contiguous(db_url):
    """A measurement of a permute's strided pass is not one of the contiguous (batch, m, n)
    for the tuner's resume, nor the other way round; rows from before the column are
    contiguous, and the column goes and comes back."""
    shape, cls, config = (4, 2048, 1024), ShapeClass(4, 2048, 1024, 4), valid_config(4, 4)
    strided = Layout(1024, 8192, 4194304, 2048)
    with Store.open(db_url) as store:
        store.record(
            None, H100, "float32", 4, shape, cls, config, Measurement("ok", 2000.0, 3000.0, 10.0)
        )
        assert store.measured(H100.name, 4, shape, config, strided) is None
        store.record(
            None,
            H100,
            "float32",
            4,
            shape,
            cls,
            config,
            Measurement("ok", 1500.0, 3000.0, 12.0),
            layout=strided,
        )
        assert store.measured(H100.name, 4, shape, config).gbps == 2000.0
        assert store.measured(H100.name, 4, shape, config, strided).gbps == 1500.0
        # the contiguous layout, given explicitly, is the contiguous row
        contiguous = Layout.contiguous(shape)
        assert store.measured(H100.name, 4, shape, config, contiguous).gbps == 2000.0
        (best,) = store.entries()  # one class, one best: the layout is not in its key
        assert best.shape_class == cls and best.gbps == 2000.0
    engine = sa.create_engine(resolve_url(db_url))
    try:
        with engine.begin() as conn:
            command.downgrade(migrations.alembic_config(conn), "0004")
    finally:
        engine.dispose()
    assert "layout" not in _columns(db_url, "at_measurements")
    assert upgrade(db_url) == migrations.head()
    with Store.open(db_url) as store:  # both rows are contiguous now: the newest answers
        assert store.measured(H100.name, 4, shape, config).gbps == 1500.0
        assert store.measured(H100.name, 4, shape, config, strided) is None


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(resolve_url(url))
    try:
        with engine.connect() as conn:
            return set(sa.inspect(conn).get_table_names())
    finally:
        engine.dispose()


def test_revisions_form_one_line():
    script = migrations.script()
    revisions = [r.revision for r in script.walk_revisions()]
    assert revisions == ["0006", "0005", "0004", "0003", "0002", "0001"]
    assert script.get_heads() == ["0006"]


def test_unknown_target_revision_is_a_store_error(db_url):
    with pytest.raises(StoreError, match="0042"):
        upgrade(db_url, revision="0042")


# --- reads never migrate --------------------------------------------------------------------------
def _fingerprint(url: str) -> object:
    """What a migration would change: a SQLite file's bytes, a PostgreSQL database's revision
    and columns."""
    path = sqlite_path(resolve_url(url))
    if path is not None:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    engine = sa.create_engine(resolve_url(url))
    try:
        with engine.connect() as conn:
            rev = conn.exec_driver_sql("SELECT version_num FROM at_alembic_version").scalar()
            return rev, {c["name"] for c in sa.inspect(conn).get_columns("at_devices")}
    finally:
        engine.dispose()


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = cli.run(list(argv), stdout=out, stderr=err)
    return rc, out.getvalue(), err.getvalue()


def test_reads_of_an_older_schema_do_not_migrate_it(db_url, rng, monkeypatch):
    """show, lookup, export and transpose()'s lookup read a revision-0001 database as it is."""
    assert upgrade(db_url, revision="0001") == "0001"
    old = _fill_revision_0001(db_url, rng)
    before = _fingerprint(db_url)

    with Store.open(db_url, readonly=True) as store:
        assert store.schema_revision() == "0001"
        (entry,) = store.entries()
        assert entry.config == old["config"] and entry.gbps == pytest.approx(old["gbps"])
        assert entry.source == "tuned"  # read without the 0004 column
        (device,) = store.devices()
        assert device.name == H100.name and device.l2_bytes == 0
    rc, out, err = _cli("show", "--json", "--db", db_url)
    assert rc == 0, err
    (shown,) = [e for e in json.loads(out) if e["source"] == "tuned"]
    assert shown["gbps"] == pytest.approx(old["gbps"])
    rc, out, err = _cli(
        "lookup", "--shape", "4096x4096", "--device", H100.name, "--json", "--db", db_url
    )
    assert rc == 0 and json.loads(out)["source"] == "tuned", err
    rc, out, err = _cli("export", "--db", db_url)
    assert rc == 0 and len(json.loads(out)["entries"]) == 1, err
    monkeypatch.setattr(lookup, "_stores", {})
    monkeypatch.setenv("AUTOTRANSPOSE_DB", db_url)
    lookup.clear_cache()
    try:
        assert lookup.choose(H100, 4, ShapeClass(1, 4096, 4096, 4)).source == "tuned"
    finally:
        lookup.clear_cache()
        for s in lookup._stores.values():
            if s is not None:
                s.close()

    assert _fingerprint(db_url) == before
    assert "l2_bytes" not in _columns(db_url, "at_devices")
    rc, out, err = _cli("db", "upgrade", "--db", db_url)  # writers still migrate
    assert rc == 0 and migrations.head() in out, err
    assert "l2_bytes" in _columns(db_url, "at_devices")
