"""The test run's own directory (tests/conftest.py): no test reads or writes the user's tuning
database, first-call winners, compiled launchers or cubin cache."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs
from conftest import RUN_DIR

from autotranspose.dispatch import winners
from autotranspose.runtime import native as _native
from autotranspose.store import resolve_url, sqlite_path, urls


def _run_dir() -> Path:
    return Path(os.environ[RUN_DIR]).resolve()


def _inside(path: str | Path) -> bool:
    return Path(path).resolve().is_relative_to(_run_dir())


def test_the_default_database_is_the_runs_own():
    assert _inside(sqlite_path(resolve_url(None)))
    assert _inside(urls.default_path())  # with $AUTOTRANSPOSE_DB unset too


def test_first_call_winners_are_not_kept_in_a_database_nobody_made():
    assert not sqlite_path(resolve_url(None)).exists()
    assert winners.writer() is None


def test_compiled_libraries_and_cubins_are_cached_in_the_run_dir():
    assert _inside(_native.cache_dir())
    assert _inside(os.environ["PYCUDA_CACHE_DIR"])  # pycuda's compile cache, read first
    assert _inside(platformdirs.user_cache_dir("pycuda", "pycuda"))  # and without it
    assert _inside(os.environ["AUTOTRANSPOSE_FAILED_DIR"])


def test_the_users_switches_are_not_read():
    for name in ("AUTOTRANSPOSE_FIRST_CALL", "AUTOTRANSPOSE_FIRST_CALL_STORE"):
        assert name not in os.environ
