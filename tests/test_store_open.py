"""How a database is opened: nothing is written to a database before it is known to be ours, reads
never create or migrate, read-only directories can be read, a silent PostgreSQL server fails fast,
and bad URLs are one line. CLI errors are one line; the Python API raises StoreError."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from _child import prepared
from _synthetic import make_objective
from store_data import H100, ok, valid_config

from autotranspose import cli
from autotranspose.dispatch import lookup
from autotranspose.errors import ForeignDatabaseError, StoreError
from autotranspose.kernels.shapes import ShapeClass
from autotranspose.store import Store, textio, upgrade
from autotranspose.store.engine import connect_args
from autotranspose.tuner import study as tuner

pytest_plugins = ("store_fixtures",)
pytestmark = pytest.mark.usefixtures("isolated_home")

REPO = Path(__file__).resolve().parent.parent
CLS = ShapeClass(1, 4096, 4096, 4)


@pytest.fixture(autouse=True)
def fresh_lookup(monkeypatch):
    """No shipped results (lookup falls through to "default"), empty caches."""
    monkeypatch.setattr(lookup, "tuning_db_dir", lambda: None)
    monkeypatch.setattr(lookup, "_stores", {})
    monkeypatch.setattr(lookup, "_warned", set())
    lookup.clear_cache()
    yield
    lookup.clear_cache()


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = cli.run(list(argv), make_objective=make_objective, stdout=out, stderr=err)
    return rc, out.getvalue(), err.getvalue()


def one_line_error(rc: int, err: str) -> str:
    assert rc == 1, err
    assert err.startswith("autotranspose: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTRANSPOSE_")}
    return {**env, "PYTHONPATH": str(REPO), **extra}


def cli_subprocess(*argv: str, timeout: float = 120, setup: str | None = None, **env: str):
    """The command line in a fresh process, run after the Python code `setup` (tests/_child.py)."""
    return subprocess.run(
        prepared(setup, [sys.executable, "-m", "autotranspose", *argv]),
        capture_output=True,
        text=True,
        env=subprocess_env(**env),
        timeout=timeout,
    )


def snapshot(directory: Path) -> dict[str, tuple[str, int]]:
    """Every file in `directory`: its sha256 and mtime (ns)."""
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(directory.iterdir())
    }


def tuned_file(path: Path) -> Path:
    """A database of ours with one result, closed (a WAL file without -wal/-shm)."""
    with Store.open(path) as store:
        store.record(None, H100, "float32", 4, (1, 4096, 4096), CLS, valid_config(4, 4), ok(2000.0))
    assert not Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists()
    return path


def tuning_json(directory: Path) -> Path:
    path = directory / "results.json"
    with Store.open("sqlite://") as scratch:
        scratch.record(
            None, H100, "float32", 4, (1, 4096, 4096), CLS, valid_config(4, 4), ok(2000.0)
        )
        path.write_text(textio.dumps(textio.export(scratch)))
    return path


# --- another application's SQLite file is never written -------------------------------------------
@pytest.fixture(params=["delete", "wal"])
def foreign_db(request, tmp_path) -> Path:
    """Another application's SQLite file (rollback journal or WAL mode), alone in its directory."""
    directory = tmp_path / "theirs"
    directory.mkdir()
    path = directory / "app.db"
    conn = sqlite3.connect(path)
    if request.param == "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.executemany("INSERT INTO users (name) VALUES (?)", [("alice",), ("bob",)])
    conn.commit()
    conn.close()
    assert [p.name for p in directory.iterdir()] == ["app.db"]
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))  # an mtime that any write would change
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["show"],
        ["show", "--json"],
        ["lookup", "--shape", "4096x4096", "--device", H100.name],
        ["export"],
        ["db", "upgrade"],
        ["import", "{json}"],
        ["tune", "--shapes", "256x256", "--trials", "2"],
    ],
    ids=["show", "show-json", "lookup", "export", "db-upgrade", "import", "tune"],
)
def test_commands_leave_a_foreign_sqlite_file_untouched(foreign_db, argv, tmp_path):
    before = snapshot(foreign_db.parent)
    argv = [a.replace("{json}", str(tuning_json(tmp_path))) for a in argv]
    rc, _, err = run(*argv, "--db", f"sqlite:///{foreign_db}")
    assert "is not an autotranspose tuning database" in one_line_error(rc, err)
    assert "users" in err and str(foreign_db) in err
    assert snapshot(foreign_db.parent) == before


def test_store_open_and_upgrade_leave_a_foreign_sqlite_file_untouched(foreign_db):
    before = snapshot(foreign_db.parent)
    for attempt in (lambda: Store.open(foreign_db), lambda: upgrade(foreign_db)):
        with pytest.raises(ForeignDatabaseError, match="not an autotranspose tuning database"):
            attempt()
    assert snapshot(foreign_db.parent) == before


def test_transpose_lookup_leaves_a_foreign_sqlite_file_untouched(foreign_db, monkeypatch):
    """transpose()'s path: lookup.choose() on the default store, $AUTOTRANSPOSE_DB naming it."""
    before = snapshot(foreign_db.parent)
    monkeypatch.setenv("AUTOTRANSPOSE_DB", f"sqlite:///{foreign_db}")
    with pytest.warns(RuntimeWarning, match="not an autotranspose tuning database"):
        assert lookup.choose(H100, 4, CLS).source == "default"
    assert snapshot(foreign_db.parent) == before


def test_show_of_a_foreign_file_from_the_shell_is_one_line(foreign_db):
    before = snapshot(foreign_db.parent)
    done = cli_subprocess("show", "--db", f"sqlite:///{foreign_db}")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("autotranspose: error: ") and done.stderr.count("\n") == 1
    assert "is not an autotranspose tuning database" in done.stderr
    assert snapshot(foreign_db.parent) == before


# --- reads never create a database ----------------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [["show"], ["lookup", "--shape", "64x64", "--device", H100.name], ["export"]],
    ids=["show", "lookup", "export"],
)
def test_read_commands_do_not_create_a_database(argv, tmp_path):
    typo = tmp_path / "typo.db"
    rc, _, err = run(*argv, "--db", str(typo))
    message = one_line_error(rc, err)
    assert f"no tuning database at {typo}" in message
    assert "autotranspose tune" in message and "autotranspose db upgrade" in message
    assert list(tmp_path.iterdir()) == []


def test_read_only_open_of_a_missing_file_is_a_store_error(tmp_path):
    with pytest.raises(StoreError, match="no tuning database at"):
        Store.open(tmp_path / "typo.db", readonly=True)
    assert list(tmp_path.iterdir()) == []


def test_reading_a_path_in_a_missing_directory_says_to_create_it_not_to_upgrade(tmp_path):
    """`db upgrade` cannot make a file in a directory that does not exist: the hint says so."""
    path = tmp_path / "missing" / "tuning.db"
    rc, _, err = run("show", "--db", str(path))
    message = one_line_error(rc, err)
    assert f"no tuning database at {path}" in message
    assert f"its directory {path.parent} does not exist" in message
    assert f"mkdir -p {path.parent}" in message and "--db (or AUTOTRANSPOSE_DB)" in message
    assert "db upgrade --db" not in message
    # the fix it names works
    path.parent.mkdir()
    rc, _, err = run("db", "upgrade", "--db", str(path))
    assert rc == 0, err
    rc, out, err = run("show", "--json", "--db", str(path))
    assert rc == 0 and json.loads(out) == [], err


def test_reading_a_path_under_a_file_says_it_is_not_a_directory(tmp_path):
    blocker = tmp_path / "home"
    blocker.write_text("")
    for argv in (["show"], ["db", "upgrade"]):
        rc, _, err = run(*argv, "--db", str(blocker / "tuning.db"))
        message = one_line_error(rc, err)
        assert f"{blocker} is not a directory" in message, message
        assert "a file in a writable directory" in message and "db upgrade --db" not in message
    assert blocker.read_text() == ""


def test_writers_still_create_the_database(tmp_path):
    rc, _, err = run("db", "upgrade", "--db", str(tmp_path / "new.db"))
    assert rc == 0, err
    rc, _, err = run("import", str(tuning_json(tmp_path)), "--db", str(tmp_path / "imported.db"))
    assert rc == 0, err
    assert (tmp_path / "new.db").is_file() and (tmp_path / "imported.db").is_file()


def test_reads_without_any_database_create_nothing(isolated_home):
    rc, out, err = run("show", "--json")
    assert rc == 0, err
    assert json.loads(out) == []  # no shipped results here (fresh_lookup)
    rc, out, err = run("lookup", "--shape", "4096x4096", "--device", H100.name)
    assert rc == 0, err
    assert not isolated_home.parent.exists()


def test_transpose_lookup_does_not_create_the_database_named_by_the_env(tmp_path, monkeypatch):
    path = tmp_path / "later.db"
    monkeypatch.setenv("AUTOTRANSPOSE_DB", str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lookup.choose(H100, 4, CLS).source == "default"
    assert not path.exists()
    tuned_file(path)  # tuned afterwards: the next lookup sees it
    lookup.clear_cache()
    assert lookup.choose(H100, 4, CLS).source == "tuned"


def test_reading_a_database_without_our_tables_says_how_to_create_them(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()
    rc, _, err = run("show", "--db", str(path))
    assert "autotranspose db upgrade" in one_line_error(rc, err)
    assert path.read_bytes() == b""


def test_a_read_only_store_refuses_writes(tmp_path):
    path = tuned_file(tmp_path / "t.db")
    with Store.open(path, readonly=True) as store:
        (entry,) = store.entries()
        assert entry.gbps == 2000.0
        with pytest.raises(StoreError, match="read-only"):
            store.upsert_device(H100)
        with (
            store.engine.connect() as conn,
            pytest.raises(sa.exc.OperationalError, match="readonly"),
        ):
            conn.exec_driver_sql("CREATE TABLE x (y)")  # mode=ro: SQLite itself refuses


@pytest.mark.postgres
def test_read_only_open_of_postgres_creates_nothing(pg_url):
    rc, _, err = run("show", "--db", pg_url)
    assert "autotranspose db upgrade" in one_line_error(rc, err)
    engine = sa.create_engine(pg_url)
    with engine.connect() as conn:
        assert sa.inspect(conn).get_table_names() == []
    engine.dispose()
    upgrade(pg_url)
    rc, _, err = run("show", "--db", pg_url, "--json")
    assert rc == 0, err


# --- a database in a read-only directory ----------------------------------------------------------
# Run in the child before its command (tests/_child.py): without these capabilities, root obeys
# file modes like anyone else.
_DROP_FILE_CAPABILITIES = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for cap in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
    if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
"""


@pytest.fixture
def read_only_dir(tmp_path) -> Iterator[tuple[Path, str | None]]:
    """A directory that the child processes (run after the code given with it, see
    tests/_child.py) cannot write: chmod 555, and for root a child without the capabilities
    that bypass file modes."""
    directory = tmp_path / "ro"
    directory.mkdir()
    setup = _DROP_FILE_CAPABILITIES if os.geteuid() == 0 else None
    yield directory, setup
    directory.chmod(0o755)


def _make_read_only(directory: Path, setup: str | None) -> None:
    directory.chmod(0o555)
    probe = subprocess.run(
        prepared(setup, [sys.executable, "-c", f"open({str(directory / 'probe')!r}, 'w')"]),
        capture_output=True,
        text=True,
    )
    if probe.returncode == 0:
        directory.chmod(0o755)
        (directory / "probe").unlink()
        pytest.skip("cannot make a directory read-only for a child process here")


def test_a_database_in_a_read_only_directory_can_be_read(read_only_dir):
    directory, setup = read_only_dir
    path = tuned_file(directory / "tuning.db")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    _make_read_only(directory, setup)
    before = snapshot(directory)

    done = cli_subprocess("show", "--json", "--db", str(path), setup=setup)
    assert done.returncode == 0, done.stderr
    assert [e["gbps"] for e in json.loads(done.stdout) if e["source"] == "tuned"] == [2000.0]
    done = cli_subprocess(
        "lookup",
        "--shape",
        "4096x4096",
        "--device",
        H100.name,
        "--json",
        "--db",
        str(path),
        setup=setup,
    )
    assert done.returncode == 0 and json.loads(done.stdout)["source"] == "tuned", done.stderr
    done = cli_subprocess("export", "--db", str(path), setup=setup)
    assert done.returncode == 0 and json.loads(done.stdout)["entries"], done.stderr
    # transpose()'s path: the default store through $AUTOTRANSPOSE_DB
    code = textwrap.dedent(f"""
        import warnings; warnings.simplefilter("error")
        from autotranspose.dispatch import lookup
        from autotranspose.runtime.device import DeviceInfo
        from autotranspose.kernels.shapes import ShapeClass
        print(lookup.choose({H100.name!r}, 4, ShapeClass(1, 4096, 4096, 4)).source)
    """)
    done = subprocess.run(
        prepared(setup, [sys.executable, "-c", code]),
        capture_output=True,
        text=True,
        env=subprocess_env(AUTOTRANSPOSE_DB=str(path)),
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "tuned", done.stderr
    assert snapshot(directory) == before


def test_a_wal_database_with_unsaved_changes_in_a_read_only_directory_says_why(read_only_dir):
    directory, setup = read_only_dir
    source = tuned_file(directory.parent / "live.db")
    writer = sqlite3.connect(source)  # holds the WAL open: the next commit stays in -wal
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("UPDATE at_best SET gbps = 2500.0")
    writer.commit()
    shutil.copy(source, directory / "tuning.db")
    shutil.copy(f"{source}-wal", directory / "tuning.db-wal")
    writer.close()
    _make_read_only(directory, setup)
    done = cli_subprocess("show", "--db", str(directory / "tuning.db"), setup=setup)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("autotranspose: error: ") and "Traceback" not in done.stderr
    assert "tuning.db-shm" in done.stderr and "read-only" in done.stderr


def test_writing_in_a_read_only_directory_is_one_line(read_only_dir):
    directory, setup = read_only_dir
    path = tuned_file(directory / "tuning.db")
    _make_read_only(directory, setup)
    done = cli_subprocess("db", "upgrade", "--db", str(path), setup=setup)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("autotranspose: error: ") and str(directory) in done.stderr


def test_reading_a_missing_database_in_a_read_only_directory_names_it_and_the_fix(read_only_dir):
    """There `db upgrade` cannot work: the hint names the directory and asks for another path."""
    directory, setup = read_only_dir
    _make_read_only(directory, setup)
    path = directory / "tuning.db"
    done = cli_subprocess("show", "--db", str(path), setup=setup)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert f"no tuning database at {path}" in done.stderr
    assert f"{directory} is not writable" in done.stderr
    assert "give --db (or AUTOTRANSPOSE_DB) a file in a writable directory" in done.stderr
    assert "db upgrade --db" not in done.stderr
    done = cli_subprocess("db", "upgrade", "--db", str(path), setup=setup)
    assert done.returncode == 1 and f"{directory} is not writable" in done.stderr, done.stderr
    assert list(directory.iterdir()) == []


@pytest.mark.parametrize("command", [["import", "RESULTS"], ["tune", "--shapes", "64x64"]])
def test_a_home_that_is_not_a_directory_names_the_path_and_the_fix(command, tmp_path):
    """HOME=/dev/null (a service account's) printed a bare `[Errno 20] Not a directory`."""
    argv = [str(tuning_json(tmp_path)) if a == "RESULTS" else a for a in command]
    env = {k: v for k, v in subprocess_env(HOME="/dev/null").items() if k != "XDG_DATA_HOME"}
    done = subprocess.run(
        [sys.executable, "-m", "autotranspose", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("autotranspose: error: cannot create the default tuning database")
    assert "cannot create /dev/null/.local" in done.stderr and "(Not a directory)" in done.stderr
    assert "--db PATH" in done.stderr and "AUTOTRANSPOSE_DB=PATH" in done.stderr


@pytest.mark.parametrize("command", [["import", "RESULTS"], ["tune", "--shapes", "64x64"]])
def test_a_read_only_home_names_the_path_and_the_fix(command, read_only_dir, tmp_path):
    """A HOME where .local cannot be created printed a bare `[Errno 13] Permission denied`."""
    home, setup = read_only_dir
    argv = [str(tuning_json(tmp_path)) if a == "RESULTS" else a for a in command]
    _make_read_only(home, setup)
    env = {k: v for k, v in subprocess_env(HOME=str(home)).items() if k != "XDG_DATA_HOME"}
    done = subprocess.run(
        prepared(setup, [sys.executable, "-m", "autotranspose", *argv]),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert f"cannot create {home / '.local'} (Permission denied)" in done.stderr
    assert "--db PATH" in done.stderr and "AUTOTRANSPOSE_DB=PATH" in done.stderr
    assert list(home.iterdir()) == []


# --- a PostgreSQL server that never answers -------------------------------------------------------
@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def test_a_silent_postgres_server_fails_show_within_seconds(silent_server):
    url = f"postgresql+psycopg://u@127.0.0.1:{silent_server}/x"
    started = time.monotonic()
    done = cli_subprocess("show", "--db", url, timeout=60)
    elapsed = time.monotonic() - started
    assert elapsed < 15, elapsed
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("autotranspose: error: ") and "Traceback" not in done.stderr
    assert f"127.0.0.1:{silent_server}" in done.stderr
    assert "AUTOTRANSPOSE_DB_CONNECT_TIMEOUT" in done.stderr and "connect_timeout" in done.stderr


@pytest.mark.parametrize("how", ["env", "url"])
def test_the_connect_timeout_is_configurable(silent_server, how):
    url = f"postgresql+psycopg://u@127.0.0.1:{silent_server}/x"
    env = {"AUTOTRANSPOSE_DB_CONNECT_TIMEOUT": "2"} if how == "env" else {}
    if how == "url":
        url += "?connect_timeout=2"
    code = textwrap.dedent(f"""
        import time
        from autotranspose.errors import StoreError
        from autotranspose.store import Store
        t = time.monotonic()
        try:
            Store.open({url!r}, readonly=True)
        except StoreError as exc:
            print(round(time.monotonic() - t, 1), exc)
    """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=subprocess_env(**env),
        timeout=60,
    )
    elapsed, _, message = done.stdout.partition(" ")
    assert done.returncode == 0 and elapsed, done.stderr
    assert 1.5 <= float(elapsed) < 6, done.stdout
    assert "within 2 s" in message and f"127.0.0.1:{silent_server}" in message


def test_a_bad_timeout_setting_is_one_line(silent_server, monkeypatch):
    monkeypatch.setenv("AUTOTRANSPOSE_DB_CONNECT_TIMEOUT", "soon")
    rc, _, err = run("show", "--db", f"postgresql+psycopg://u@127.0.0.1:{silent_server}/x")
    assert "AUTOTRANSPOSE_DB_CONNECT_TIMEOUT" in one_line_error(rc, err)


@pytest.mark.postgres
def test_postgres_sessions_carry_the_timeouts(pg_url, monkeypatch):
    with Store.open(pg_url) as store, store.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "5min"
    monkeypatch.setenv("AUTOTRANSPOSE_DB_STATEMENT_TIMEOUT", "7")
    with Store.open(pg_url) as store, store.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "7s"
    with Store.open(pg_url + "?options=-c%20statement_timeout%3D9s") as store:
        with store.engine.connect() as conn:  # the URL's own setting wins
            assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "9s"
    monkeypatch.setenv("AUTOTRANSPOSE_DB_STATEMENT_TIMEOUT", "0")
    with Store.open(pg_url) as store, store.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "0"  # none


def test_optuna_gets_the_connect_timeout_too(monkeypatch):
    url = "postgresql+psycopg://u@db.example/tuning"
    assert connect_args(url) == {"connect_timeout": 5}
    monkeypatch.setenv("AUTOTRANSPOSE_DB_CONNECT_TIMEOUT", "0.5")
    assert connect_args(url) == {"connect_timeout": 2}  # libpq's least
    assert connect_args(url + "?connect_timeout=30") == {}  # the URL's own
    assert connect_args("sqlite:///x.db") == {}
    calls = []
    monkeypatch.setattr(
        optuna.storages, "RDBStorage", lambda url, **kw: calls.append(kw["engine_kwargs"])
    )
    tuner.open_storage(url)
    assert calls[0]["connect_args"] == {"connect_timeout": 2}


@pytest.mark.postgres
def test_a_statement_past_the_timeout_names_the_setting(pg_url, monkeypatch):
    with Store.open(pg_url) as store:
        store.upsert_device(H100)
    monkeypatch.setenv("AUTOTRANSPOSE_DB_STATEMENT_TIMEOUT", "1")
    blocker = sa.create_engine(pg_url)
    with blocker.connect() as conn, Store.open(pg_url, readonly=True) as store:
        conn.exec_driver_sql("LOCK TABLE at_devices IN ACCESS EXCLUSIVE MODE")  # held: no commit
        started = time.monotonic()
        with pytest.raises(StoreError, match="AUTOTRANSPOSE_DB_STATEMENT_TIMEOUT") as info:
            store.devices()
        assert time.monotonic() - started < 10
        assert "statement timeout" in str(info.value)
        conn.rollback()
    blocker.dispose()


# --- database URLs --------------------------------------------------------------------------------
def test_an_unknown_url_scheme_lists_the_supported_ones():
    rc, _, err = run("show", "--db", "sqlit:///x.db")
    message = one_line_error(rc, err)
    assert "'sqlit'" in message and "sqlite:///" in message and "postgresql+psycopg://" in message
    with pytest.raises(StoreError, match="sqlit"):
        Store.open("sqlit:///x.db")


def test_a_missing_driver_names_the_package_to_install():
    try:
        import pg8000  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pg8000 is installed")
    rc, _, err = run("show", "--db", "postgresql+pg8000://u@h/x")
    message = one_line_error(rc, err)
    assert "pip install pg8000" in message and "postgresql+psycopg://" in message
    with pytest.raises(StoreError, match="pip install pg8000"):
        Store.open("postgresql+pg8000://u@h/x", readonly=True)


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u@h/x",
        "mysql+pymysql://u@h/x",
        "mariadb://u@h/x",
        "oracle://u@h/x",
        "mssql+pyodbc://u@h/x",
        "postgres://u@h/x",
    ],
)
def test_an_unsupported_kind_of_database_names_the_supported_ones(url):
    """A mysql:// URL was told to `pip install mysqlclient`, for a database no other message
    lists: every kind but SQLite and PostgreSQL gets the same line, and no driver to install."""
    rc, _, err = run("show", "--db", url)
    message = one_line_error(rc, err)
    backend = url.split(":")[0].split("+")[0]
    assert f"{backend!r} in " in message and "(SQLite, PostgreSQL)" in message
    assert "sqlite:///" in message and "postgresql+psycopg://" in message
    assert "pip install mysqlclient" not in message and "PyMySQL" not in message
    for command in (
        ["import", str(REPO / "tuning_db" / "NVIDIA_H100_80GB_HBM3.json")],
        ["tune", "--shapes", "64x64"],
        ["db", "upgrade"],
    ):
        assert run(*command, "--db", url)[2] == err
    with pytest.raises(StoreError, match=r"not a kind of database autotranspose supports"):
        Store.open(url)


def test_transpose_lookup_warns_about_a_bad_url(monkeypatch):
    monkeypatch.setenv("AUTOTRANSPOSE_DB", "sqlit:///x.db")
    with pytest.warns(RuntimeWarning, match="sqlit"):
        assert lookup.choose(H100, 4, CLS).source == "default"
