"""The command line, run in-process on real SQLite files (tune with the synthetic objective)."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from _synthetic import DEVICE, SyntheticObjective, make_objective

from autotranspose import cli
from autotranspose.cli.tune import ProgressBar
from autotranspose.errors import ShapeError
from autotranspose.kernels.config import KernelConfig, seed_config
from autotranspose.kernels.shapes import parse_shape
from autotranspose.store import Store
from autotranspose.store.measurement import Measurement
from autotranspose.tuner.study import TrialReport

REPO = Path(__file__).resolve().parent.parent
NAME = DEVICE.name


def run(*argv: str, objective=make_objective) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = cli.run(list(argv), make_objective=objective, stdout=out, stderr=err)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "tuning.db")


@pytest.fixture(scope="module")
def tuned_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tuning run per module (four Optuna studies: seconds each), for every test to copy."""
    path = tmp_path_factory.mktemp("tuned") / "tuning.db"
    rc, _, err = run(
        "tune",
        "--shapes",
        "2048x2048",
        "4x512x512",
        "--dtypes",
        "float32,int8",
        "--trials",
        "10",
        "--seed",
        "1",
        "--db",
        str(path),
    )
    assert rc == 0, err
    return path


@pytest.fixture
def tuned(db: str, tuned_once: Path) -> str:
    """A database as `tune` leaves it, the test's own: a copy of the module's one run (SQLite's
    backup: the whole database, its write-ahead log included)."""
    with closing(sqlite3.connect(tuned_once)) as src, closing(sqlite3.connect(db)) as dst:
        src.backup(dst)
    return db


@pytest.mark.parametrize(
    ("text", "shape"),
    [("8192x8192", (1, 8192, 8192)), ("64x1024x1024", (64, 1024, 1024)), ("7X9", (1, 7, 9))],
)
def test_shapes_parse(text: str, shape: tuple[int, int, int]) -> None:
    assert parse_shape(text) == shape


@pytest.mark.parametrize("text", ["8192", "0x5", "2x3x4x5", "ax4", "-1x4", ""])
def test_bad_shapes_are_rejected(text: str) -> None:
    with pytest.raises(ShapeError, match="not a shape"):
        parse_shape(text)


def test_tune_prints_a_table_and_stores_every_result(tuned: str) -> None:
    with Store.open(tuned) as store:
        entries = store.entries(NAME)
    assert sorted((e.elem_bytes, str(e.shape_class)) for e in entries) == [
        (1, "1x2048x2048/v16"),
        (1, "4x512x512/v16"),
        (4, "1x2048x2048/v4"),
        (4, "4x512x512/v4"),
    ]


def test_tune_output(db: str) -> None:
    rc, out, err = run("tune", "--shapes", "2048x2048", "--trials", "6", "--db", db)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["dtype", "shape", "class", "config"]
    row = lines[2].split()
    assert row[:3] == ["float32", "1x2048x2048", "1x2048x2048/v4"]
    assert float(row[4]) > 0 and row[5].endswith("%") and row[6].startswith("6/6/0/")
    assert "float32 1x2048x2048: 6 trials (6 measured" in err
    assert "tuned 1 of 1" in err and "A new study" not in err


def test_tune_again_resumes_and_measures_nothing_new(tuned: str) -> None:
    measured: list[SyntheticObjective] = []

    def objective(*args):
        measured.append(SyntheticObjective())
        return measured[-1]

    rc, out, _ = run(
        "tune", "--shapes", "2048x2048", "--trials", "10", "--db", tuned, objective=objective
    )
    assert rc == 0 and "0/0/0/0" in out
    assert measured[0].calls == [] and measured[0].closed


def test_tune_reports_a_shape_where_nothing_worked_and_goes_on(db: str) -> None:
    def objective(dtype, shape, device, conjugate):
        return SyntheticObjective(fail=_AllFail() if dtype == "int8" else None)

    rc, out, err = run(
        "tune",
        "--shapes",
        "256x256",
        "--dtypes",
        "int8",
        "float32",
        "--trials",
        "3",
        "--db",
        db,
        objective=objective,
    )
    assert rc == 1
    assert "int8 1x256x256: no config ran correctly" in err
    assert "float32" in out and "int8" not in out


class _AllFail(dict):
    """Every config fails (a dict that holds every key)."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> str:
        return "nvcc: unsupported gpu architecture 'compute_200'"


def test_tune_rejects_conjugate_of_real_types(db: str) -> None:
    rc, _, err = run("tune", "--shapes", "64x64", "--dtypes", "float32", "--conjugate", "--db", db)
    assert rc == 2 and "--conjugate needs complex64 or complex128" in err


def test_show_lists_entries_per_device(tuned: str) -> None:
    rc, out, _ = run("show", "--db", tuned)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == NAME
    assert lines[1].split() == ["source", "elem", "dtypes", "class", "config", "GB/s", "%", "copy"]
    rows = [line.split() for line in lines[3:7]]
    assert [r[:2] for r in rows] == [
        ["tuned", "s1"],
        ["tuned", "s1"],
        ["tuned", "s4"],
        ["tuned", "s4"],
    ]
    assert all(r[6].endswith("%") and float(r[5]) > 0 for r in rows)


def test_show_includes_shipped_results_without_a_database(tmp_path, monkeypatch) -> None:
    """A GPU model not in this machine, no database, no pycuda: the shipped results."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv("AUTOTRANSPOSE_DB", raising=False)
    rc, out, _ = run("show", "--device", "NVIDIA H100 80GB HBM3", "--json")
    data = json.loads(out)
    assert rc == 0 and data and {d["source"] for d in data} == {"shipped"}
    assert {d["elem_bytes"] for d in data} == {1, 2, 4, 8, 16}
    assert not list(tmp_path.rglob("*.db"))  # reading results created no database


def test_show_json_is_machine_readable(tuned: str) -> None:
    rc, out, _ = run("show", "--db", tuned, "--json")
    data = [d for d in json.loads(out) if d["source"] == "tuned"]
    assert rc == 0 and len(data) == 4
    first = data[0]
    assert first["device"] == NAME and first["elem_bytes"] == 1
    assert first["config"]["elem_bytes"] == 1 and first["config_key"].startswith("s1_")
    assert 0 < first["ratio"] < 1 and first["gbps"] > 0 and first["stale"] is False


def test_show_of_another_device_and_of_an_empty_database(tuned: str, db: str) -> None:
    rc, out, err = run("show", "--db", tuned, "--device", "NVIDIA H100 80GB HBM3")
    assert rc == 0 and out.splitlines()[0] == "NVIDIA H100 80GB HBM3"
    assert all(line.startswith("shipped") for line in out.splitlines()[3:-1] if line)
    rc, out, err = run("show", "--db", tuned, "--device", "Some Other GPU")
    assert rc == 0 and out == "" and "no tuned results for 'Some Other GPU'" in err


def test_show_marks_stale_entries(tuned: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotranspose.store import hooks

    monkeypatch.setattr(hooks, "_kernel_version", lambda config, problem="": "a-newer-kernel")
    rc, out, _ = run("show", "--db", tuned)
    assert rc == 0 and "stale" in out.splitlines()[3]
    assert "not served" in out


def test_lookup_says_what_a_call_would_use(tuned: str) -> None:
    rc, out, _ = run(
        "lookup", "--shape", "2048x2048", "--dtype", "float32", "--device", NAME, "--db", tuned
    )
    assert rc == 0
    fields = dict(line.split(None, 1) for line in out.splitlines())
    assert fields["from"] == "tuned for this class"
    assert fields["config"].startswith("s4_")
    assert "GB/s" in fields["speed"]


def test_lookup_json(tuned: str) -> None:
    rc, out, _ = run(
        "lookup",
        "--shape",
        "1000x2048",
        "--dtype",
        "int32",
        "--device",
        NAME,
        "--db",
        tuned,
        "--json",
    )
    data = json.loads(out)
    assert rc == 0
    assert data["source"] == "nearest" and data["shape_class"] == "1x1024x2048/v4"
    assert data["elem_bytes"] == 4 and data["config"]["elem_bytes"] == 4
    assert data["device"] == NAME and data["gbps"] > 0 and 0 < data["ratio"] < 1


def test_lookup_of_an_untuned_gpu_gives_the_default(tuned: str) -> None:
    rc, out, _ = run(
        "lookup", "--shape", "4096x4096", "--device", "Some Other GPU", "--db", tuned, "--json"
    )
    assert rc == 0 and json.loads(out)["source"] == "default"


def test_lookup_prints_the_cuda_source(tuned: str) -> None:
    rc, out, _ = run("lookup", "--shape", "2048x2048", "--device", NAME, "--db", tuned, "--source")
    rc2, js, _ = run("lookup", "--shape", "2048x2048", "--device", NAME, "--db", tuned, "--json")
    config = KernelConfig.from_dict(json.loads(js)["config"])
    assert rc == rc2 == 0
    assert config.kernel_name in out
    assert "__global__" in out


def test_lookup_without_a_device_or_gpu_names_the_known_devices(tuned: str) -> None:
    pytest.importorskip("autotranspose.runtime.compiler")
    try:
        import pycuda  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pycuda is installed: the local GPU would answer")
    rc, _, err = run("lookup", "--shape", "64x64", "--db", tuned)
    assert rc == 2 and err.count("\n") == 1
    assert f"devices in the database: {NAME!r}" in err


def test_export_and_import_round_trip(tuned: str, tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    rc, _, err = run("export", "--db", tuned, "-o", str(path))
    assert rc == 0 and "wrote" in err
    rc, stdout_text, _ = run("export", "--db", tuned, "--device", NAME)
    assert rc == 0 and stdout_text == path.read_text()
    other = str(tmp_path / "other.db")
    rc, _, err = run("import", str(path), "--db", other)
    assert rc == 0 and f"imported 4 entries of {NAME}" in err

    def shown(url: str) -> set[tuple]:
        entries = json.loads(run("show", "--db", url, "--json")[1])
        return {
            (e["elem_bytes"], e["shape_class"], e["config_key"], round(e["gbps"], 1))
            for e in entries
        }

    assert shown(other) == shown(tuned)


def test_import_of_a_bad_file_is_one_line(tmp_path: Path, db: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "autotranspose-tuning/1", "device": {"name": "x"}, "entries": 3}')
    rc, _, err = run("import", str(bad), "--db", db)
    assert rc == 1 and err.startswith("autotranspose: error: ") and err.count("\n") == 1


def test_db_upgrade(db: str) -> None:
    rc, out, _ = run("db", "upgrade", "--db", db)
    assert rc == 0 and out.startswith("database is at revision ")
    assert Path(db).exists()


def test_devices_without_pycuda_is_one_clear_line() -> None:
    try:
        import pycuda  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pycuda is installed")
    rc, out, err = run("devices")
    assert rc == 1 and out == ""
    assert err.startswith("autotranspose: error: pycuda is not installed") and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["tune", "--shapes", "64x64"],  # through the measuring process: its error, unwrapped
        ["tune", "--shapes", "64x64", "--cast", "bf16:e4m3"],
        ["tune", "--shapes", "64x64", "--inplace"],
        ["devices"],
        ["bench", "--shapes", "64x64"],
        ["bench", "--small", "1"],
    ],
    ids=lambda argv: "-".join(a.strip("-") for a in argv[:3]),
)
def test_a_gpu_command_without_pycuda_says_what_to_install_in_user_words(
    argv: list[str], db: str
) -> None:
    """`tune` printed `...could not start: CudaUnavailableError: pycuda is not installed`."""
    try:
        import pycuda  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pycuda is installed")
    rc, out, err = run(*argv, *(["--db", db] if argv[0] != "devices" else []), objective=None)
    assert rc == 1 and out == "", err
    assert err.startswith("autotranspose: error: pycuda is not installed") and err.count("\n") == 1
    assert "python3 -m pip install 'autotranspose[cuda]'" in err and "NVIDIA GPU" in err
    assert "Error" not in err and "could not start" not in err  # no class name, no wrapping


@pytest.mark.parametrize("before", [None, "sqlite:////nonexistent/theirs.db"])
def test_bench_with_db_leaves_the_callers_database_setting_as_it_was(
    db: str, before: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bench --db` serves that database for its own calls only: run in-process (a notebook,
    a test), it set AUTOTRANSPOSE_DB for the rest of the process."""
    if before is None:
        monkeypatch.delenv("AUTOTRANSPOSE_DB", raising=False)
    else:
        monkeypatch.setenv("AUTOTRANSPOSE_DB", before)
    run("bench", "--shapes", "64x64", "--db", db, objective=None)  # fails here without a GPU
    assert os.environ.get("AUTOTRANSPOSE_DB") == before


@pytest.mark.parametrize(
    "argv",
    [
        ["tune", "--shapes", "-3x4"],
        ["tune", "--shapes=-3x4"],
        ["tune", "--shapes", "8x8", "-3x4"],
        ["bench", "--shapes", "-3x4"],
        ["lookup", "--device", NAME, "--shape", "-3x4"],
    ],
    ids=["tune", "tune-equals", "tune-second", "bench", "lookup"],
)
def test_a_negative_side_names_the_shape_and_how_to_write_one(argv: list[str], db: str) -> None:
    """argparse took `-3x4` for an option: "expected at least one argument"."""
    rc, out, err = run(*argv, "--db", db)
    _one_clear_line(rc, err)
    option = "--shape" if argv[0] == "lookup" else "--shapes"
    assert f"argument {option}: '-3x4' is not a shape" in err and out == ""
    assert "positive integers, e.g. 8192x8192" in err
    assert "expected" not in err and not Path(db).exists()


def test_a_negative_shape_from_the_shell_is_named_too(db: str) -> None:
    done = _subprocess("tune", "--shapes", "-3x4", "--db", db)
    _one_clear_line(done.returncode, done.stderr)
    assert (
        "argument --shapes: '-3x4' is not a shape" in done.stderr
        and "e.g. 8192x8192" in done.stderr
    )


def test_negative_axes_can_be_written_after_the_option(db: str) -> None:
    """`--axes -1,0,1` (counted from the end) is a value, as `--axes=-1,0,1` always was."""
    assert run("db", "upgrade", "--db", db)[0] == 0
    outs = []
    for argv in (["--axes=-1,0,1"], ["--axes", "-1,0,1"], ["--axes", "2,0,1"]):
        rc, out, err = run("lookup", "--shape", "4x5x6", *argv, "--device", NAME, "--db", db)
        assert rc == 0, err
        outs.append(out)
    assert outs[0] == outs[1] == outs[2] and "by (2, 0, 1)" in outs[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["tune"],  # --shapes is required
        ["tune", "--shapes", "64x64", "--trials", "0"],
        ["tune", "--shapes", "64x64", "--sampler", "cmaes"],
        ["tune", "--shapes", "64x64", "--dtypes", "object"],
        ["lookup", "--shape", "64"],
        ["show", "--nope"],
        ["frobnicate"],
        ["db"],
    ],
)
def test_errors_are_one_line_and_exit_non_zero(argv: list[str], db: str) -> None:
    rc, _, err = run(*argv, "--db", db) if argv[0] in ("tune", "lookup") else run(*argv)
    assert rc in (1, 2)
    assert err.startswith("autotranspose: error: ") and err.count("\n") == 1
    assert "Traceback" not in err


def test_bench_options_parse() -> None:
    args = cli.build_parser().parse_args(
        [
            "bench",
            "--shapes",
            "8192x8192",
            "64x1024x1024",
            "--dtypes",
            "float32,int8",
            "--json",
            "b.json",
            "--png",
            "b.png",
            "--markdown",
            "b.md",
            "--repeat",
            "5",
            "--device",
            "1",
            "--db",
            "x.db",
        ]
    )
    assert args.shapes == ["8192x8192", "64x1024x1024"] and args.dtypes == ["float32,int8"]
    assert (args.json, args.png, args.markdown, args.repeat, args.device, args.db) == (
        "b.json",
        "b.png",
        "b.md",
        5,
        1,
        "x.db",
    )


def test_bench_random_options_parse(rng) -> None:
    n, seed = int(rng.integers(1, 100)), int(rng.integers(0, 2**31))
    args = cli.build_parser().parse_args(["bench", "--random", str(n), "--seed", str(seed)])
    assert (args.random, args.seed) == (n, seed)
    assert cli.build_parser().parse_args(["bench"]).random is None


@pytest.mark.parametrize(
    "bad, says",
    [
        (["--random", "0"], "at least 1"),
        (["--random", "x"], "not an integer"),
        (["--seed", "-1"], "at least 0"),
    ],
)
def test_bench_random_rejects_bad_counts(bad, says) -> None:
    with pytest.raises(cli.UsageError, match=says):
        cli.build_parser().parse_args(["bench", *bad])


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--seed", "-1", "at least 0"),
        ("--seed", str(2**32), "at most 4294967295"),
        ("--seed", "9" * 5000, "not an integer"),
        ("--trials", "7" * 5000, "not an integer"),
        ("--trials", "-" + "7" * 4000, "at least 1"),
        ("--timeout", "inf", "not a finite number"),
        ("--timeout", "nan", "not a finite number"),
        ("--timeout", "1e999", "not a finite number"),
        ("--timeout", "Infinity", "give one such as 60"),
    ],
)
def test_bad_numbers_are_one_short_line(option: str, value: str, says: str, db: str) -> None:
    """A seed NumPy cannot take was a ValueError traceback; a huge number was echoed whole."""
    rc, _, err = run("tune", "--shapes", "64x64", option, value, "--db", db)
    _one_clear_line(rc, err)
    assert f"argument {option}: " in err and says in err


def test_tune_takes_the_seeds_the_tuner_takes() -> None:
    """`tune --seed` and the tuner's own check (tune(), tune_gpu(), tune_devices()) agree
    on the range; argparse refuses the rest before anything is opened."""
    from autotranspose.tuner.study import SEED_LIMIT

    def parse(seed: int) -> int:
        return (
            cli.build_parser().parse_args(["tune", "--shapes", "64x64", "--seed", str(seed)]).seed
        )

    for seed in (0, SEED_LIMIT - 1):
        assert parse(seed) == seed
    with pytest.raises(cli.UsageError, match=f"at most {SEED_LIMIT - 1}"):
        parse(SEED_LIMIT)
    with pytest.raises(cli.UsageError, match="at least 0"):
        parse(-1)


def test_the_progress_bar_draws_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    bar = ProgressBar(stream, "float32 1x64x64")
    config = seed_config(4)
    m = Measurement("ok", 1000.0, 2000.0, 1.0)
    for done in (1, 2):
        bar(TrialReport(done, config, m, False, done, 4, 1000.0))
    bar.close()
    text = stream.getvalue()
    assert "\rfloat32 1x64x64 [############------------] 2/4 best 1000 GB/s" in text
    assert text.endswith("\n")
    quiet = io.StringIO()
    ProgressBar(quiet, "x")(TrialReport(1, config, m, False, 1, 4, 1.0))
    assert quiet.getvalue() == ""


def _subprocess(*argv: str, **kw) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "autotranspose", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        **kw,
    )


def test_python_dash_m_help() -> None:
    done = _subprocess("--help")
    assert done.returncode == 0
    for command in ("tune", "show", "lookup", "export", "import", "devices", "db", "bench"):
        assert command in done.stdout


def test_python_dash_m_error_is_one_line(tmp_path: Path) -> None:
    done = _subprocess("show", "--db", str(tmp_path / "missing" / "tuning.db"))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("autotranspose: error: no tuning database at ")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


# --- hostile and careless input: one line, no traceback, nothing raw echoed ------------------------
def _one_clear_line(rc: int, err: str, rc_wanted: int = 2) -> None:
    assert rc == rc_wanted, err
    assert err.startswith("autotranspose: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and len(err) < 400


def _long_number(rng) -> str:
    """More digits than Python converts to an int (4300 by default)."""
    return "".join(map(str, rng.integers(1, 10, size=int(rng.integers(4301, 6000)))))


def test_non_ascii_digits_in_a_shape_are_rejected(rng) -> None:
    digit = str(rng.choice(["²", "³", "¹", "٣", "８", "⑤"]))
    for text in (f"{digit}x3", f"3x{digit}", f"2x3x{digit}"):
        with pytest.raises(ShapeError, match="not a shape"):
            parse_shape(text)


def test_a_dimension_beyond_64_bit_is_rejected_without_converting_it(rng) -> None:
    with pytest.raises(ShapeError, match="too large"):
        parse_shape(f"{_long_number(rng)}x3")
    with pytest.raises(ShapeError, match="too large"):
        parse_shape(f"{2**63}x1")
    with pytest.raises(ShapeError, match="too large"):
        parse_shape(f"{2**32}x{2**32}")  # each side fits, the whole does not
    side = int(rng.integers(1, 2**20))
    assert parse_shape(f"{side}x{2**40}") == (1, side, 2**40)


@pytest.mark.parametrize(
    ("command", "option"),
    [("lookup", "--shape"), ("tune", "--shapes"), ("bench", "--shapes")],
)
def test_a_bad_shape_is_one_line_naming_the_option(command: str, option: str, db: str, rng) -> None:
    extra = ["--device", NAME] if command == "lookup" else []
    for bad in ("²x3", f"{_long_number(rng)}x3", f"3x{rng.integers(1, 100)}x4x5"):
        rc, out, err = run(command, option, bad, *extra, "--db", db)
        _one_clear_line(rc, err)
        assert f"argument {option}: " in err and "e.g. 8192x8192" in err and out == ""


@pytest.mark.parametrize(
    ("command", "option"),
    [("lookup", "--dtype"), ("tune", "--dtypes"), ("bench", "--dtypes")],
)
@pytest.mark.parametrize(
    "bad",
    ["(-1,)i4", "(99999999999999,)f8", pytest.param("x" * 5000, id="5000-letters"), "object"],
)
def test_a_bad_dtype_is_one_line_naming_the_option(
    command: str, option: str, bad: str, db: str
) -> None:
    shape_option = "--shape" if command == "lookup" else "--shapes"
    extra = ["--device", NAME] if command == "lookup" else []
    rc, out, err = run(command, shape_option, "64x64", option, bad, *extra, "--db", db)
    _one_clear_line(rc, err)
    assert f"argument {option}: " in err and "float32" in err and out == ""


def _hostile_name(rng) -> str:
    control = chr(int(rng.choice([*range(0, 9), *range(11, 32), 127])))
    return f"H100\n\x1b[31m{control}\u202e"


@pytest.mark.parametrize("command", ["show", "lookup", "export"])
def test_a_device_name_with_control_characters_is_refused_and_shown_escaped(
    command: str, tuned: str, rng
) -> None:
    extra = ["--shape", "64x64"] if command == "lookup" else []
    rc, out, err = run(command, "--device", _hostile_name(rng), *extra, "--db", tuned)
    _one_clear_line(rc, err)
    assert "argument --device: " in err and "GPU model name" in err
    assert err.isprintable() is False and err[:-1].isprintable()  # only the final newline
    assert "\\x1b" in err and "\\n" in err and out == ""


def test_the_command_line_takes_exactly_the_device_names_the_database_takes(db: str, rng) -> None:
    from autotranspose.errors import DeviceError
    from autotranspose.runtime.device import DeviceInfo

    assert run("db", "upgrade", "--db", db)[0] == 0
    alphabet = [*"AZaz09 _-.()", "\t", "\x1b", "/", "'", "é", "\u202e", ":"]
    for _ in range(12):
        name = "".join(rng.choice(alphabet, size=int(rng.integers(1, 8))))
        name = name if rng.random() < 0.9 else "H" * int(rng.integers(99, 102))
        if name == "--":  # argparse's own reading of --device=-- (test_a_double_dash_...)
            continue
        try:
            DeviceInfo(name, (9, 0))
            valid = True
        except DeviceError:
            valid = False
        rc, _, err = run("show", f"--device={name}", "--db", db)  # '=': names may start with -
        assert (rc == 0) == valid and (rc == 2) == (not valid), (name, err)


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "--device=--"],
        ["export", "--output=--"],
        ["lookup", "--shape=--"],
        ["tune", "--shapes=--"],
        ["tune", "--shapes", "64x64", "--trials=--"],
    ],
)
def test_a_double_dash_value_is_refused(argv: list[str], db: str) -> None:
    """argparse before 3.13 drops '--' from `--opt=--` and skips the option's check."""
    if sys.version_info >= (3, 13) and argv[1] in ("--device=--", "--output=--"):
        pytest.skip("argparse keeps '--' as the value here, and it is a valid one")
    rc, _, err = run(*argv, "--db", db)
    _one_clear_line(rc, err)
    assert "argument --" in err


def test_control_characters_in_any_error_are_shown_escaped(tmp_path: Path, db: str) -> None:
    rc, _, err = run("import", str(tmp_path / "results\x1b[2J.json"), "--db", db)
    _one_clear_line(rc, err, rc_wanted=1)
    assert err[:-1].isprintable() and "\\x1b[2J" in err


def test_a_bandwidth_beyond_any_gpu_in_the_database_is_never_printed(tuned: str) -> None:
    """A best's GB/s set to 1e308 straight in SQLite was printed as 300 digits: the row is
    bounded as an import is, skipped with one line naming it and the fix, and not served."""
    import re
    import sqlite3

    with sqlite3.connect(tuned) as conn:
        conn.execute("UPDATE at_best SET gbps = 1e308 WHERE shape_class = '1x2048x2048/v4'")
        (row_id,) = conn.execute(
            "SELECT id FROM at_best WHERE shape_class = '1x2048x2048/v4'"
        ).fetchone()
    conn.close()
    fix = f"DELETE FROM at_best WHERE id = {row_id}"
    rc, out, err = run("lookup", "--shape", "2048x2048", "--device", NAME, "--db", tuned)
    (line,) = err.splitlines()
    assert rc == 0 and line.startswith(f"autotranspose: warning: skipping at_best row {row_id}: ")
    assert "gbps 1e+308 is outside what any GPU moves" in line
    assert "tune its class again" in line and fix in line
    assert "tuned for this class" not in out and not re.search(r"\d{12}", out)
    rc, out, err = run("show", "--db", tuned)
    (line,) = err.splitlines()
    assert rc == 0 and line.startswith(f"autotranspose: skipped a bad row: at_best row {row_id}")
    assert fix in line and not re.search(r"\d{12}", out) and "1x2048x2048/v4" not in out
    rc, out, err = run("export", "--db", tuned)
    assert rc == 0 and len(err.splitlines()) == 1 and fix in err
    assert len(json.loads(out)["entries"]) == 3


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["-o", "/dev/full"], "cannot write /dev/full: No space left on device"),
        (["--all-devices", "-o", "/dev/full"], "/dev/full is not a directory"),
    ],
)
def test_an_export_to_a_full_disk_names_the_path_and_why(argv, says, tuned: str) -> None:
    """`export -o /dev/full` printed a bare `[Errno 28] No space left on device`."""
    rc, _, err = run("export", *argv, "--db", tuned)
    _one_clear_line(rc, err, rc_wanted=1 if "-o" in argv[0] else 2)
    assert says in err and "-o" in err and "[Errno" not in err


def test_an_export_into_a_missing_directory_names_the_path_and_why(
    tuned: str, tmp_path: Path
) -> None:
    target = tmp_path / "no" / "such" / "results.json"
    rc, _, err = run("export", "-o", str(target), "--db", tuned)
    _one_clear_line(rc, err, rc_wanted=1)
    assert f"cannot write {target}: No such file or directory" in err and "leave out -o" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["import", "results.json"],
        ["tune", "--shapes", "64x64"],
        ["show"],
        ["lookup", "--shape", "64x64", "--device", NAME],
        ["export"],
        ["db", "upgrade"],
    ],
    ids=lambda argv: argv[0] if argv[0] != "db" else "db-upgrade",
)
@pytest.mark.parametrize("empty", ["", " "], ids=["empty", "blank"])
def test_an_empty_db_is_refused_not_read_as_the_current_directory(
    argv: list[str], empty: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(*argv, "--db", empty)
    _one_clear_line(rc, err)
    assert "argument --db: " in err and "names no database" in err and out == ""
    assert "--db tuning.db" in err and "$AUTOTRANSPOSE_DB" in err
    assert list(tmp_path.iterdir()) == []  # nothing made in the current directory


@pytest.mark.parametrize(
    "argv",
    [["show"], ["export"], ["lookup", "--shape", "64x64", "--device", NAME], ["db", "upgrade"]],
    ids=lambda argv: argv[0] if argv[0] != "db" else "db-upgrade",
)
def test_a_directory_as_db_names_a_file_inside_it(argv: list[str], tmp_path: Path) -> None:
    directory = tmp_path / "results"
    directory.mkdir()
    rc, out, err = run(*argv, "--db", str(directory))
    assert rc == 1 and out == "" and err.count("\n") == 1, err
    assert f"the tuning database {directory} is a directory, not a file" in err
    assert f"give a file inside it, such as --db {directory / 'tuning.db'}" in err
    assert list(directory.iterdir()) == []
    # the fix it names works
    rc, _, err = run("db", "upgrade", "--db", str(directory / "tuning.db"))
    assert rc == 0, err
    if argv[0] != "db":
        rc, out, err = run(*argv, "--db", str(directory / "tuning.db"))
        assert "is a directory" not in err and "no tuning database" not in err, err


def _two_device_db(db: str) -> tuple[str, str]:
    """A SQLite file with results of two GPU models (the synthetic one and another)."""
    from autotranspose.runtime.device import DeviceInfo

    other = DeviceInfo("Other GPU 7 (PCIe)", (8, 9), multiprocessors=84)
    rc, _, err = run("tune", "--shapes", "1024x1024", "--trials", "4", "--db", db)
    assert rc == 0, err
    rc, _, err = run(
        "tune",
        "--shapes",
        "512x2048",
        "--dtypes",
        "int8",
        "--trials",
        "4",
        "--db",
        db,
        objective=lambda *a: SyntheticObjective(other),
    )
    assert rc == 0, err
    return NAME, other.name


def test_export_of_all_devices_writes_one_file_each_that_imports_back(
    db: str, tmp_path: Path
) -> None:
    names = _two_device_db(db)
    rc, out, err = run("export", "--db", db)  # which one? the error says how to get both
    _one_clear_line(rc, err, rc_wanted=1)
    assert "--all-devices" in err
    folder = tmp_path / "exported"
    rc, out, err = run("export", "--all-devices", "-o", str(folder), "--db", db)
    assert rc == 0 and out == "", err
    files = sorted(folder.glob("*.json"))
    assert [f.name for f in files] == ["Other_GPU_7_PCIe.json", "Synthetic_GPU_9000.json"]
    assert err.count("wrote ") == 2
    for name, path in zip(sorted(names), files, strict=True):
        rc, one, _ = run("export", "--device", name, "--db", db)
        assert rc == 0 and one == path.read_text()
    other = str(tmp_path / "other.db")
    rc, _, err = run("import", *map(str, files), "--db", other)
    assert rc == 0, err

    def tuned_entries(url: str) -> list[tuple]:
        entries = json.loads(run("show", "--db", url, "--json")[1])
        return sorted(
            (e["device"], e["elem_bytes"], e["shape_class"], e["config_key"])
            for e in entries
            if e["source"] == "tuned"
        )

    assert len(tuned_entries(db)) == 2 and tuned_entries(other) == tuned_entries(db)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--all-devices"], "-o DIR"),
        (["--all-devices", "--device", NAME, "-o", "x"], "not both"),
        (["--all-devices", "-o", "-"], "-o DIR"),
    ],
)
def test_export_all_devices_needs_a_directory_and_no_device(argv, says, db: str) -> None:
    rc, _, err = run("export", *argv, "--db", db)
    _one_clear_line(rc, err)
    assert says in err


def test_warnings_print_as_one_line(tuned: str) -> None:
    """A bad row in the database: export warns about it (one line) and exports the rest."""
    import sqlite3

    with sqlite3.connect(tuned) as conn:
        (row_id,) = conn.execute("SELECT min(id) FROM at_best").fetchone()
        conn.execute("UPDATE at_best SET gbps = 'fast' WHERE id = ?", (row_id,))
    conn.close()
    done = _subprocess("export", "--db", tuned)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"autotranspose: warning: skipping at_best row {row_id}: ")
    assert "gbps must be a number" in lines[0] and "Traceback" not in done.stderr
    assert len(json.loads(done.stdout)["entries"]) == 3


# --- lookup --axes: permute plans ------------------------------------------------------------------
def test_lookup_axes_shows_the_plan_and_the_kernel_of_its_transpose(tuned: str) -> None:
    rc, out, err = run(
        "lookup",
        "--shape",
        "64x256x56x56",
        "--axes",
        "0,2,3,1",
        "--dtype",
        "float16",
        "--device",
        NAME,
        "--db",
        tuned,
    )
    assert rc == 0, err
    lines = out.splitlines()
    assert (
        lines[0]
        == "permute (64, 256, 56, 56) by (0, 2, 3, 1), 2-byte elements -> (64, 56, 56, 256)"
    )
    assert any(line.startswith("transpose 64 x 256x3136 of 2-byte elements") for line in lines)
    assert "1 pass, 1 launch" in lines
    fields = dict(
        line.split(None, 1) for line in lines if line.split(None, 1)[0] in ("call", "config")
    )
    assert fields["call"] == "2-byte 64x256x3136 -> class 64x256x4096/v8"
    assert fields["config"].startswith("s2_")


def test_lookup_axes_of_a_row_copy_needs_no_device(tmp_path: Path) -> None:
    rc, out, err = run(
        "lookup",
        "--shape",
        "8x4096x32x128",
        "--axes",
        "0,-2,1,3",
        "--dtype",
        "bfloat16",
        "--db",
        str(tmp_path / "none.db"),
    )
    assert rc == 0, err
    assert (
        "copy 32 x 4096 rows of 256 bytes" in out
        and "x 8 in the launch" in out
        and "1 launch" in out
    )
    assert out.splitlines()[-1] == "kernel  at_copy_rows_s16"
    rc, src, _ = run("lookup", "--shape", "8x4096x32x128", "--axes", "0,2,1,3", "--source")
    assert rc == 0 and "at_copy_rows_s16" in src and "__global__" in src
    # rows of 256 bytes: a first call also times one packed launch of the same bytes
    assert "a first call also times: packed 8 x 32 x 4096 x 16 of 16-byte elements" in out
    rc, out, _ = run(
        "lookup", "--shape", "8x4096x32x128", "--axes", "0,2,1,3", "--dtype", "bfloat16", "--json"
    )
    (alt,) = json.loads(out)["alternatives"]
    assert alt["kind"] == "packed" and alt["box"] == [1, 8, 8, 16]


def test_lookup_axes_of_a_realigned_row_copy_names_its_kernel(tmp_path: Path) -> None:
    """Rows of 21 bytes (no word over 1 byte): the copy runs realigned, and lookup names the
    realigning kernel, whose source --source prints."""
    rc, out, err = run(
        "lookup",
        "--shape",
        "11618x18x232x21",
        "--axes",
        "0,2,1,3",
        "--dtype",
        "uint8",
        "--db",
        str(tmp_path / "none.db"),
    )
    assert rc == 0, err
    assert "rows of 21 bytes realigned into 16-byte words (runs of 87696 bytes" in out
    # the word copy, its rows along the output's side-by-side 18
    assert "a first call also times: copy 11618 x 18 rows of 21 bytes (21 1-byte words" in out
    assert out.splitlines()[-1] == "kernel  at_copy_runs"
    rc, src, _ = run(
        "lookup", "--shape", "11618x18x232x21", "--axes", "0,2,1,3", "--dtype", "uint8", "--source"
    )
    assert rc == 0 and "at_copy_runs(" in src and "__global__" in src


def test_lookup_axes_of_a_packed_pass_needs_no_device(tmp_path: Path) -> None:
    """Six small launches become one packed launch: the plan says so and why, and --source
    prints the kernel for its box."""
    rc, out, err = run(
        "lookup",
        "--shape",
        "2x7x3x5x11",
        "--axes",
        "0,2,1,4,3",
        "--dtype",
        "float32",
        "--db",
        str(tmp_path / "none.db"),
    )
    assert rc == 0, err
    assert "packed 2 x 3 x 7 x 11 x 5 of 4-byte elements in one launch" in out
    assert "in boxes of 1 x 3 x 7 x 11 x 5 (runs of 4620 bytes read, 4620 written)" in out
    assert "why packed: the batched pass would be 6 launches of 1540 bytes" in out
    kernel = "at_packed_s4_b5x11x7x3_i1032_ffff_n"  # output order; the input reads 11, 5, 3, 7
    assert "1 pass, 1 launch" in out and out.splitlines()[-1] == f"kernel  {kernel}"
    rc, src, _ = run("lookup", "--shape", "2x7x3x5x11", "--axes", "0,2,1,4,3", "--source")
    assert rc == 0 and f"{kernel}(const u32*" in src and "struct at_packed_args" in src
    rc, out, _ = run("lookup", "--shape", "2x7x3x5x11", "--axes", "0,2,1,4,3", "--json")
    data = json.loads(out)
    assert data["launches"] == 1 and data["kernel"] == kernel
    assert data["passes"][0]["kind"] == "packed" and len(data["passes"][0]["dims"]) == 5
    assert data["passes"][0]["box"] == [1, 3, 7, 11, 5]


def test_lookup_axes_of_a_gather_needs_no_device(tmp_path: Path) -> None:
    """A permute no box takes (eight dims of 2, every one moved) is one gather launch, and
    --source prints the gather kernels."""
    shape, axes = "x".join(["2"] * 8), "7,6,5,4,3,2,1,0"
    rc, out, err = run("lookup", "--shape", shape, "--axes", axes, "--dtype", "float32")
    assert rc == 0, err
    assert "gather 2 x 2 x 2 x 2 x 2 x 2 x 2 x 2 of 4-byte elements in one launch" in out
    assert "why gather: the batched pass would be 32 launches of 32 bytes" in out
    assert out.splitlines()[-1] == "kernel  at_gather_s4"
    rc, src, _ = run("lookup", "--shape", shape, "--axes", axes, "--source")
    assert rc == 0 and "at_gather_s4" in src and "struct at_gather_dims" in src


def test_lookup_axes_json(tuned: str) -> None:
    rc, out, _ = run(
        "lookup", "--shape", "6x10", "--axes", "1,0", "--device", NAME, "--db", tuned, "--json"
    )
    data = json.loads(out)
    assert rc == 0 and data["case"] == "transpose" and data["out_shape"] == [10, 6]
    assert data["passes"][0]["kind"] == "transpose" and data["passes"][0]["m"] == 6
    assert data["plan"].startswith("permute (6, 10) by (1, 0)") and data["config_key"].startswith(
        "s4_"
    )
    rc, out, _ = run("lookup", "--shape", "3x5", "--axes", "0,1", "--json")
    assert rc == 0 and json.loads(out)["kernel"] == "cuMemcpyDtoDAsync"


@pytest.mark.parametrize(
    ("argv", "says", "code"),
    [
        (["--shape", "4x5x6", "--axes", "0,1"], "name 2 axes but the array has 3", 1),
        (["--shape", "4x5x6", "--axes", "0,1,1"], "repeat axis 1", 1),
        (["--shape", "4x5x6", "--axes", "0,one,2"], "argument --axes: ", 2),
        (["--shape", "4x5x6x7x8x9x2x2x2", "--axes", "0"], "argument --shape: ", 2),
        (["--shape", "4x5", "--axes", "1,0", "--conjugate", "--dtype", "complex64"], "--axes", 2),
    ],
)
def test_lookup_axes_errors_are_one_line(argv: list[str], says: str, code: int, db: str) -> None:
    rc, out, err = run("lookup", *argv, "--db", db)
    assert rc == code and out == ""
    assert err.startswith("autotranspose: error: ") and err.count("\n") == 1 and says in err


def test_bench_permute_options_parse() -> None:
    args = cli.build_parser().parse_args(["bench", "--random-permute", "40", "--seed", "7"])
    assert (args.random_permute, args.seed, args.axes) == (40, 7, None)
    args = cli.build_parser().parse_args(["bench", "--shapes", "64x256x56x56", "--axes", "0,2,3,1"])
    assert (args.shapes, args.axes) == (["64x256x56x56"], "0,2,3,1")


@pytest.mark.parametrize(
    ("argv", "says", "code"),
    [
        (["--random-permute", "0"], "at least 1", 2),
        (["--shapes", "4x5x6", "--axes", "0,1"], "name 2 axes but the array has 3", 1),
        (["--shapes", "4x5x6", "4x5", "--axes", "2,1,0"], "name 3 axes but the array has 2", 1),
        (["--shapes", "4x5x6", "--axes", "0,1,2", "--random", "3"], "--axes", 2),
        (["--random", "3", "--random-permute", "3"], "not both", 2),
        (["--shapes", "4x5x6x7x1x1x1x1x1", "--axes", "0"], "argument --shapes: ", 2),
    ],
)
def test_bench_permute_errors_are_one_line_before_any_gpu_work(argv, says, code) -> None:
    rc, out, err = run("bench", *argv)
    assert rc == code and out == ""
    assert err.startswith("autotranspose: error: ") and err.count("\n") == 1 and says in err


# --- tune --axes: a permute's transpose pass ------------------------------------------------------
class _Factory:
    """An objective factory that remembers what it was asked for (and the layouts given)."""

    def __init__(self) -> None:
        self.asked: list[tuple] = []

    def __call__(self, dtype, shape, device, conjugate, **layout):
        self.asked.append((dtype, shape, device, conjugate, layout.get("layout")))
        return SyntheticObjective()


def _permute_rows(out: str) -> list[list[str]]:
    lines = out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("dtype"))
    assert lines[start].split()[:6] == ["dtype", "permute", "axes", "elem", "shape", "strides"]
    return [line.split() for line in lines[start + 2 :]]


def test_tune_axes_tunes_a_contiguous_pass_in_its_class_study(db: str) -> None:
    """NCHW -> NHWC is a batched transpose of contiguous matrices: the plain class's study,
    measured without strides, as `tune --shapes 64x256x3136` would."""
    factory = _Factory()
    rc, out, err = run(
        "tune",
        "--shapes",
        "64x256x56x56",
        "--axes",
        "0,2,3,1",
        "--dtypes",
        "float16",
        "--trials",
        "4",
        "--db",
        db,
        objective=factory,
    )
    assert rc == 0, err
    assert factory.asked == [("float16", (64, 256, 3136), 0, False, None)]
    (row,) = _permute_rows(out)
    assert row[:7] == [
        "float16",
        "64x256x56x56",
        "0,2,3,1",
        "s2",
        "64x256x3136",
        "contiguous",
        "64x256x4096/v8",
    ]
    assert "float16 64x256x56x56 axes 0,2,3,1: float16 64x256x3136: 4 trials" in err
    assert "tuned 1 of 1 transpose passes (0 of 1 permutes had nothing to tune)" in err
    rc, out, _ = run(
        "tune", "--shapes", "64x256x3136", "--dtypes", "float16", "--trials", "4", "--db", db
    )
    assert rc == 0 and "0/0/0/0" in out  # the same study, done already


def test_tune_axes_measures_a_strided_pass_on_its_strides_and_lookup_serves_it(db: str) -> None:
    factory = _Factory()
    argv = ["--shape", "512x64x1024", "--axes", "2,1,0", "--device", NAME, "--db", db, "--json"]
    rc, out, err = run(
        "tune",
        "--shapes",
        "512x64x1024",
        "--axes",
        "2,1,0",
        "--trials",
        "6",
        "--db",
        db,
        objective=factory,
    )
    assert rc == 0, err
    assert factory.asked == [("float32", (64, 512, 1024), 0, False, (65536, 32768, 1024, 512))]
    (row,) = _permute_rows(out)
    assert row[4:8] == ["64x512x1024", "65536,32768,1024,512", "64x512x1024/v4", row[7]]
    rc, out, err = run("lookup", *argv)
    info = json.loads(out)
    assert rc == 0, err
    assert (info["source"], info["shape_class"], info["config_key"]) == (
        "tuned",
        "64x512x1024/v4",
        row[7],
    )
    # run again: the strided study resumes, nothing is measured
    factory = _Factory()
    rc, out, _ = run(
        "tune",
        "--shapes",
        "512x64x1024",
        "--axes",
        "2,1,0",
        "--trials",
        "6",
        "--db",
        db,
        objective=factory,
    )
    assert rc == 0 and _permute_rows(out)[0][10] == "0/0/0/0"


@pytest.mark.parametrize(
    ("shape", "axes", "dtype", "says"),
    [
        (
            "8x4096x32x128",
            "0,2,1,3",
            "float16",
            "float16 8x4096x32x128 axes 0,2,1,3: copy 32 x 4096 rows of 256 bytes",
        ),
        (
            "2x7x3x5x11",
            "0,2,1,4,3",
            "float32",
            "float32 2x7x3x5x11 axes 0,2,1,4,3: packed 2 x 3 x 7 x 11 x 5 of 4-byte elements",
        ),
        (
            "2x2x2x2x2x2x2x2",
            "7,6,5,4,3,2,1,0",
            "float32",
            "float32 2x2x2x2x2x2x2x2 axes 7,6,5,4,3,2,1,0: gather 2 x 2 x 2 x 2 x 2 x 2 x 2 x 2",
        ),
        ("3x5", "0,1", "int8", "int8 3x5 axes 0,1: copy 15 contiguous bytes"),
    ],
)
def test_tune_axes_says_a_copy_or_gather_has_nothing_to_tune(
    shape: str, axes: str, dtype: str, says: str, tmp_path: Path
) -> None:
    factory = _Factory()
    db = tmp_path / "tuning.db"
    rc, out, err = run(
        "tune",
        "--shapes",
        shape,
        "--axes",
        axes,
        "--dtypes",
        dtype,
        "--db",
        str(db),
        objective=factory,
    )
    assert rc == 0, err
    (line,) = out.splitlines()
    kind = next(k for k in ("packed", "gather", "copy") if f": {k} " in says)
    assert line.startswith(says) and line.endswith(f"; nothing to tune: {kind} pass")
    assert factory.asked == [] and not db.exists()  # no GPU work, no database
    assert "tuned 0 of 0 transpose passes (1 of 1 permutes had nothing to tune)" in err


def test_tune_axes_of_several_shapes_and_dtypes(db: str) -> None:
    """Per dtype and shape: one head swap is a transpose, tuned; the other a copy, said; a
    swap of pairs of float16 is a transpose of 4-byte words, tuned as uint32."""
    factory = _Factory()
    rc, out, err = run(
        "tune",
        "--shapes",
        "8x4096x32x128",
        "--axes",
        "0,2,3,1",
        "--dtypes",
        "float16,int8",
        "--trials",
        "3",
        "--db",
        db,
        objective=factory,
    )
    assert rc == 0, err
    pass_shape = (8, 4096, 4096)
    assert [a[:2] for a in factory.asked] == [("float16", pass_shape), ("int8", pass_shape)]
    assert [r[:4] for r in _permute_rows(out)] == [
        ["float16", "8x4096x32x128", "0,2,3,1", "s2"],
        ["int8", "8x4096x32x128", "0,2,3,1", "s1"],
    ]
    rc, out, err = run(
        "tune",
        "--shapes",
        "8x4096x32x128",
        "16x1024x512x2",
        "--axes",
        "0,2,1,3",
        "--dtypes",
        "float16",
        "--trials",
        "3",
        "--db",
        db,
        objective=factory,
    )
    assert rc == 0, err
    assert out.splitlines()[0].endswith("nothing to tune: copy pass")
    (row,) = _permute_rows(out)
    assert row[1:7] == [
        "16x1024x512x2",
        "0,2,1,3",
        "s4",
        "16x1024x512",
        "contiguous",
        "16x1024x512/v4",
    ]
    assert factory.asked[-1][:2] == ("uint32", (16, 1024, 512))


@pytest.mark.parametrize(
    ("argv", "says", "code"),
    [
        (["--shapes", "4x5x6", "--axes", "0,1"], "name 2 axes but the array has 3", 1),
        (["--shapes", "4x5x6", "--axes", "0,1,1"], "repeat axis 1", 1),
        (["--shapes", "4x5x6", "4x5", "--axes", "2,1,0"], "name 3 axes but the array has 2", 1),
        (["--shapes", "4x5x6", "--axes", "0,one,2"], "argument --axes: ", 2),
        (["--shapes", "4x5x6x7x1x1x1x1x1", "--axes", "0"], "argument --shapes: ", 2),
        (["--shapes", "4x5x6", "--axes", "2,1,0", "--dtypes", "object"], "argument --dtypes: ", 2),
        (
            ["--shapes", "64x32", "--axes", "1,0", "--dtypes", "complex64", "--conjugate"],
            "--conjugate is for transposes; permute (--axes) has none",
            2,
        ),
        (
            ["--shapes", "64x32", "--axes", "1,0", "--devices", "0,1"],
            "give --device INDEX, not --devices",
            2,
        ),
    ],
)
def test_tune_axes_errors_are_one_line_before_any_gpu_work(argv, says, code, db: str) -> None:
    factory = _Factory()
    rc, out, err = run("tune", *argv, "--db", db, objective=factory)
    assert rc == code and out == "" and factory.asked == []
    assert err.startswith("autotranspose: error: ") and err.count("\n") == 1 and says in err
    assert not Path(db).exists()
