"""`autotranspose import` on bad input: one line naming the problem and the fix, nothing
written (special files, numbers beyond any GPU, several files at once)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _child import prepared
from store_data import H100, ok, random_config, sample_shape, tuning_doc

from autotranspose import cli
from autotranspose.store import Store

pytest_plugins = ("store_fixtures",)
pytestmark = pytest.mark.usefixtures("isolated_home")

REPO = Path(__file__).resolve().parent.parent
PREFIX = "autotranspose: error: "


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = cli.run(list(argv), stdout=out, stderr=err)
    return rc, out.getvalue(), err.getvalue()


# Run in the child before its command (tests/_child.py). Today's code read /dev/zero until
# memory ran out: a failing test must not take the host.
_LIMITED_MEMORY = "import resource; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))"


@pytest.mark.parametrize("kind", ["fifo", "char-device", "directory"])
def test_import_of_a_special_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        path = tmp_path / "pipe.json"
        os.mkfifo(path)  # no writer: opening it to read would wait forever
    elif kind == "char-device":
        path = Path("/dev/zero")  # endless
    else:
        path = tmp_path / "dir.json"
        path.mkdir()
    db = tmp_path / "t.db"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        prepared(
            _LIMITED_MEMORY,
            [sys.executable, "-m", "autotranspose", "import", str(path), "--db", str(db)],
        ),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1 and done.stdout == "", done.stderr[-2000:]
    assert done.stderr.startswith(PREFIX) and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert f"{path} is a " in done.stderr and "not a regular file" in done.stderr
    assert "nothing was imported" in done.stderr and "autotranspose export" in done.stderr


def _file(tmp_path: Path, doc: dict, name: str) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize(
    ("where", "value", "named"),
    [
        ("device.l2_bytes", 2**70, "l2_bytes"),
        ("device.max_threads_per_block", -5, "max_threads_per_block"),
        ("entry.gbps", 1e308, "gbps"),
        ("entry.ratio", 1.5, "ratio"),  # gbps / copy_gbps is at most 1 here
    ],
)
def test_import_of_numbers_beyond_any_gpu_is_one_line(
    tmp_path: Path, db_url: str, rng, where: str, value, named: str
) -> None:
    """The stored device and results stay as they were; the line names field and fix."""
    with Store.open(db_url) as store:
        shape, cls = sample_shape(rng)
        store.record(
            None, H100, "float32", 4, shape, cls, random_config(rng, 4, cls.vec), ok(500.0)
        )
        before = (store.devices(), store.entries())
    doc = tuning_doc(rng, 5)
    part, field = where.split(".")
    (doc["device"] if part == "device" else doc["entries"][3])[field] = value
    rc, out, err = run("import", _file(tmp_path, doc, "bad.json"), "--db", db_url)
    assert rc == 1 and out == "" and err.startswith(PREFIX) and err.count("\n") == 1, err
    assert "bad.json" in err and named in err and "nothing was imported" in err
    if part == "entry":
        assert "entry 3" in err
    with Store.open(db_url) as store:
        assert (store.devices(), store.entries()) == before


def test_import_of_a_good_and_a_bad_file_writes_nothing(tmp_path: Path, db_url: str, rng) -> None:
    good = _file(tmp_path, tuning_doc(rng, 7), "good.json")
    doc = tuning_doc(rng, 4)
    doc["entries"][2]["copy_gbps"] = -1.0
    bad = _file(tmp_path, doc, "bad.json")
    rc, _, err = run("import", good, bad, "--db", db_url)
    assert rc == 1 and err.startswith(PREFIX) and err.count("\n") == 1, err
    assert f"{bad}: entry 2: copy_gbps" in err and "nothing was imported" in err
    with Store.open(db_url) as store:
        assert store.entries() == [] and store.devices() == []
    other = _file(tmp_path, tuning_doc(rng, 4), "other.json")
    rc, _, err = run("import", good, other, "--db", db_url)
    assert rc == 0, err
    assert err.splitlines() == [
        f"imported 7 entries of {H100.name} from {good}",
        f"imported 4 entries of {H100.name} from {other}",
    ]


def test_a_file_with_a_utf8_byte_order_mark_imports(tmp_path: Path, rng) -> None:
    """A results file saved by an editor that writes a BOM was refused as not JSON."""
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(tuning_doc(rng, 3)).encode("utf-8"))
    db = str(tmp_path / "tuning.db")
    rc, _, err = run("import", str(path), "--db", db)
    assert rc == 0 and err == f"imported 3 entries of {H100.name} from {path}\n", err
    with Store.open(db) as store:
        assert len(store.entries()) == 3
