"""Tuning on several GPUs at once, with stand-in GPUs: real processes, a real SQLite file,
the synthetic objective in each GPU's process (no GPU needed)."""

from __future__ import annotations

import functools
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from _child import prepared
from _synthetic import DEVICE, OTHER_DEVICE, device_objective, logged
from optuna.trial import TrialState

from autotranspose import cli
from autotranspose.errors import DeviceError, TuningError
from autotranspose.store import Store
from autotranspose.tuner import multigpu
from autotranspose.tuner.study import TrialReport, TuneSettings

TESTS = Path(__file__).resolve().parent
CASE = ("float32", (2048, 2048))


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "measured.log"
    monkeypatch.setenv("AUTOTRANSPOSE_TEST_MEASURE_LOG", str(path))
    return path


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with two GPUs, as the driver would count them."""
    monkeypatch.setattr(multigpu, "local_device_count", lambda: 2)


def _objective(*models: str, delay: float = 0.05, fail_dtypes: tuple[str, ...] = ()):
    return functools.partial(device_objective, models=models, delay=delay, fail_dtypes=fail_dtypes)


def _trials(url: str, device=DEVICE) -> list[optuna.trial.FrozenTrial]:
    names = [n for n in optuna.get_all_study_names(url) if f":{device.slug}:" in n]
    assert len(names) == 1, names
    return optuna.load_study(study_name=names[0], storage=url).trials


def _counted(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    return [t for t in trials if "status" in t.user_attrs]


# --- which GPUs ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("all", "all"),
        (" ALL ", "all"),
        ("0,2", (0, 2)),
        ("1", (1,)),
        (" 3, 1 ", (3, 1)),
        (2, (2,)),
        ([0, 2], (0, 2)),
        ((1,), (1,)),
    ],
)
def test_device_specs_parse(spec, parsed) -> None:
    assert multigpu.device_spec(spec) == parsed


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "not a list of GPU indices: give all, or indices like 0,2"),
        ("gpu0", "not a list of GPU indices"),
        ("0,,1", "not a list of GPU indices"),
        ("-1", "not a list of GPU indices"),
        ("1.5", "not a list of GPU indices"),
        ("0,1,0", "names GPU 0 more than once: list each GPU once"),
        ([], "devices is empty"),
        ([-1], "start at 0"),
        (1.0, "an index or a list"),
        (True, "an index or a list"),
    ],
)
def test_bad_device_specs_say_what_to_give(spec, message: str) -> None:
    with pytest.raises(TuningError, match=message):
        multigpu.device_spec(spec)


@pytest.mark.parametrize(
    ("spec", "count", "indices"),
    [("all", 2, (0, 1)), ("all", 1, (0,)), ("0,2", 4, (0, 2)), ("1", 2, (1,))],
)
def test_device_specs_resolve_on_a_machine(spec, count: int, indices) -> None:
    assert multigpu.resolve_devices(spec, count) == indices


@pytest.mark.parametrize(
    ("spec", "count", "message"),
    [
        (
            "0,2",
            2,
            "GPU 2 is not on this machine, which has 2 .indices 0 to 1.; "
            "`autotranspose devices` lists them",
        ),
        ("all", 0, "sees no GPU; check `nvidia-smi`"),
    ],
)
def test_gpus_the_machine_lacks_are_errors(spec, count: int, message: str) -> None:
    with pytest.raises(DeviceError, match=message):
        multigpu.resolve_devices(spec, count)


# --- one study, one budget ------------------------------------------------------------------------
def test_gpus_of_one_model_share_one_study_and_spend_its_budget_once(
    tmp_path: Path, log: Path, two_gpus: None
) -> None:
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    heard: list[tuple[int, object]] = []
    runs = multigpu.tune_devices(
        [CASE],
        devices="all",
        db=url,
        trials=12,
        batch=2,
        seed=5,
        make_objective=_objective(),
        progress=lambda i, e: heard.append((i, e)),
    )
    assert [(r.index, r.device, r.error, r.ok) for r in runs] == [
        (0, DEVICE.name, None, True),
        (1, DEVICE.name, None, True),
    ]
    measured = logged(log)
    counts = Counter(key for _, key in measured)
    assert max(counts.values()) == 1, "a config was measured twice"
    assert len({pid for pid, _ in measured}) == 2, "one GPU did all the work"
    trials = _trials(url)
    counted = _counted(trials)
    assert len(counted) == 12, "the budget is the study's, not each GPU's"
    assert sum(counts.values()) + sum(bool(t.user_attrs.get("reused")) for t in counted) == 12
    assert {t.user_attrs["device_index"] for t in counted} == {0, 1}
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    # both processes answer with the study's best, and the store serves it
    (a,), (b,) = runs[0].results, runs[1].results
    assert a.study_name == b.study_name and a.config == b.config
    assert a.trials + b.trials == 12
    best = max(t.value for t in counted if t.state == TrialState.COMPLETE)
    with Store.open(url) as store:
        entry = store.best(DEVICE.name, 4, a.shape_class)
    assert entry is not None and entry.config == a.config and entry.gbps == best
    # the run rows name their GPU
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT settings_json FROM at_runs")).scalars().all()
    engine.dispose()
    assert sorted(json.loads(r)["device_index"] for r in rows) == [0, 1]
    # progress: every trial, then the case, from each GPU
    assert sorted(i for i, e in heard if e in (a, b)) == [0, 1]
    assert sum(1 for _, e in heard if isinstance(e, TrialReport)) == 12


def test_gpus_of_different_models_get_a_study_and_a_budget_each(
    tmp_path: Path, log: Path, two_gpus: None
) -> None:
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    runs = multigpu.tune_devices(
        [CASE],
        devices=[0, 1],
        db=url,
        trials=6,
        batch=3,
        make_objective=_objective("same", "other", delay=0.0),
    )
    assert [r.device for r in runs] == [DEVICE.name, OTHER_DEVICE.name]
    assert all(r.ok for r in runs)
    for device, run in ((DEVICE, runs[0]), (OTHER_DEVICE, runs[1])):
        counted = _counted(_trials(url, device))
        assert len(counted) == 6 and {t.user_attrs["device_index"] for t in counted} == {run.index}
        assert run.results[0].measured == 6


# --- failures -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "error"),
    [
        ("broken", "the measuring process could not start: CUDA_ERROR_NO_DEVICE"),
        ("crash", "its process ended with exit code 3 before finishing its cases"),
    ],
)
def test_a_failed_gpu_is_reported_and_the_others_finish(
    tmp_path: Path, log: Path, two_gpus: None, model: str, error: str
) -> None:
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    # GPU 0 measures slowly enough that GPU 1 reaches its first measurement before the shared
    # budget is spent (with no delay, a loaded CI machine once let GPU 0 take all 6 trials
    # while GPU 1's process was still starting: it never crashed)
    runs = multigpu.tune_devices(
        [CASE],
        devices="all",
        db=url,
        trials=6,
        batch=2,
        make_objective=_objective("same", model, delay=0.5),
    )
    assert runs[0].ok and runs[0].results[0].measurement.ok
    assert not runs[1].ok and error in runs[1].error and runs[1].results == ()
    assert len(_counted(_trials(url))) == 6  # GPU 0 took over the whole budget


def test_a_case_no_config_ran_on_is_a_failure_of_that_case_only(
    tmp_path: Path, log: Path, two_gpus: None
) -> None:
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    runs = multigpu.tune_devices(
        [("int8", (256, 256)), CASE],
        devices="0,1",
        db=url,
        trials=3,
        make_objective=_objective("same", "other", delay=0.0, fail_dtypes=("int8",)),
    )
    for run in runs:
        assert run.error is None and not run.ok
        assert [f.dtype for f in run.failures] == ["int8"]
        assert "no config ran correctly" in run.failures[0].error
        assert [r.dtype for r in run.results] == ["float32"]


def test_bad_settings_are_refused_before_any_process_starts(tmp_path: Path, two_gpus) -> None:
    db = str(tmp_path / "tuning.db")
    with pytest.raises(TuningError, match="trials must be a positive int"):
        multigpu.tune_devices([CASE], db=db, trials=0, make_objective=_objective())
    with pytest.raises(TuningError, match="no cases to tune"):
        multigpu.tune_devices([], db=db, make_objective=_objective())
    with pytest.raises(TuningError, match=r"seed must be an int from 0 to 2\*\*32-1"):
        multigpu.tune_devices([CASE], db=db, seed=-1, make_objective=_objective())
    with pytest.raises(DeviceError, match="GPU 3 is not on this machine"):
        multigpu.tune_devices([CASE], devices="0,3", db=db, make_objective=_objective())


def test_settings_come_as_keywords_or_as_one_value_not_both(tmp_path: Path, two_gpus) -> None:
    db = tmp_path / "tuning.db"
    with pytest.raises(TuningError, match=r"not both \(settings and trials were given\)"):
        multigpu.tune_devices(
            [CASE],
            db=str(db),
            trials=4,
            settings=TuneSettings(trials=4),
            make_objective=_objective(),
        )
    assert not db.exists()


def test_the_largest_seed_wraps_for_the_next_process(tmp_path: Path, two_gpus) -> None:
    """Each process tunes with seed + its position: from 2**32-1 the second one's seed wraps
    to 0 (it was 2**32, which NumPy refuses, and that GPU's cases failed)."""
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    runs = multigpu.tune_devices(
        [CASE],
        devices="all",
        db=url,
        trials=4,
        batch=2,
        seed=2**32 - 1,
        make_objective=_objective(),
    )
    assert [(r.error, r.failures, r.ok) for r in runs] == [(None, (), True)] * 2


# --- Ctrl-C, and a parent that dies ------------------------------------------------------------------
_DRIVER = """
import sys
from autotranspose import cli
from autotranspose.tuner import multigpu
from _synthetic import device_objective
import functools
multigpu.local_device_count = lambda: 2
sys.exit(cli.run(sys.argv[1:], make_objective=functools.partial(device_objective, delay=0.2)))
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# In the driver's process before it starts (tests/_child.py): SIGINT as a terminal leaves it
# (a runner started in the background, `cmd &` in a script, hands its children SIGINT ignored,
# which Python keeps: the driver would never see the test's Ctrl-C).
_DEFAULT_CTRL_C = "import signal; signal.signal(signal.SIGINT, signal.SIG_DFL)"


def _start_driver(tmp_path: Path, log: Path) -> tuple[subprocess.Popen, str, list[int]]:
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    proc = subprocess.Popen(
        prepared(
            _DEFAULT_CTRL_C,
            [
                sys.executable,
                "-c",
                _DRIVER,
                "tune",
                "--shapes",
                "2048x2048",
                "--trials",
                "200",
                "--batch",
                "2",
                "--devices",
                "all",
                "--db",
                url,
            ],
        ),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        pids = sorted({pid for pid, _ in logged(log)})
        if len(pids) == 2:
            return proc, url, pids
        time.sleep(0.05)
    proc.kill()
    _, err = proc.communicate()
    pytest.fail(f"both GPUs' processes never measured: rc={proc.returncode} {err[-2000:]}")


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def test_ctrl_c_stops_every_gpu_and_leaves_the_study_resumable(tmp_path: Path, log: Path) -> None:
    proc, url, children = _start_driver(tmp_path, log)
    proc.send_signal(signal.SIGINT)  # to the parent only: it must pass it on
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted (run the same command again to resume)" in err
    assert _wait_gone(children, 10) == [], "a GPU's process outlived the command"
    trials = _trials(url)
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    interrupted = [t for t in trials if "interrupted" in t.user_attrs.get("error", "")]
    assert interrupted, "the running trials were not abandoned"
    # their claims were released: tuning again measures them, it does not wait for the dead;
    # a config the other GPU's process measured and stored keeps its claim (the next run
    # answers it from the store), however the trial that waited for it ended
    name = optuna.get_all_study_names(url)[0]
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        stored = set(
            conn.execute(
                sa.text(
                    "SELECT c.key FROM at_measurements m JOIN at_configs c ON c.id = m.config_id"
                )
            ).scalars()
        )
    engine.dispose()
    with Store.open(url) as store:
        for t in interrupted:
            if t.user_attrs["config"] in stored:
                continue
            claim = f"{t.user_attrs['shape']}:{t.user_attrs['config']}"
            assert store.claim(name, claim, "another process"), f"{claim} is still claimed"


_SWALLOWED = """
import os, signal, sys, time
from autotranspose.tuner.study import remember_ctrl_c
from autotranspose.tuner.study.batch import check_ctrl_c

remember_ctrl_c()


class Collected:
    def __del__(self):  # Python only prints what a __del__ raises
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # the handler runs here, inside __del__


Collected()
print("ran on", flush=True)  # the KeyboardInterrupt was swallowed
try:
    check_ctrl_c()
except KeyboardInterrupt:
    print("raised again", flush=True)
    sys.exit(130)
"""


def test_a_ctrl_c_python_swallowed_is_raised_again_between_trials() -> None:
    """A KeyboardInterrupt raised inside a __del__ or a weakref callback is only printed, so
    a GPU's process told once to stop kept tuning (the Ctrl-C test above, under load, left
    trials RUNNING): each GPU's process remembers the Ctrl-C and raises it again at the next
    check between trials."""
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    done = subprocess.run(
        [sys.executable, "-c", _SWALLOWED], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split("\n")[:2] == ["ran on", "raised again"], done.stdout + done.stderr
    assert "KeyboardInterrupt" in done.stderr and done.returncode == 130


def test_gpu_processes_stop_when_the_command_is_killed(tmp_path: Path, log: Path) -> None:
    proc, _, children = _start_driver(tmp_path, log)
    proc.kill()
    proc.communicate()
    assert _wait_gone(children, 30) == [], "a GPU's process outlived a killed command"


# --- the command line -----------------------------------------------------------------------------
def _cli(*argv: str, objective=None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = cli.run(
        list(argv), make_objective=objective or _objective(delay=0.0), stdout=out, stderr=err
    )
    return rc, out.getvalue(), err.getvalue()


def test_tune_devices_all_prints_a_line_per_case_and_gpu_then_the_table(
    tmp_path: Path, log: Path, two_gpus: None
) -> None:
    db = str(tmp_path / "tuning.db")
    rc, out, err = _cli(
        "tune",
        "--shapes",
        "2048x2048",
        "512x512",
        "--trials",
        "6",
        "--batch",
        "2",
        "--devices",
        "all",
        "--db",
        db,
    )
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["gpu", "dtype", "shape"]
    assert sorted(line.split()[0] + " " + line.split()[2] for line in lines[2:]) == [
        "0 1x2048x2048",
        "0 1x512x512",
        "1 1x2048x2048",
        "1 1x512x512",
    ]
    for gpu in (0, 1):
        for shape in ("1x2048x2048", "1x512x512"):
            assert f"GPU {gpu}: float32 {shape}: " in err
    assert "tuned 4 of 4 (case, GPU) pairs on GPUs 0, 1 in " in err
    url = f"sqlite:///{db}"
    names = optuna.get_all_study_names(url)
    assert len(names) == 2  # one study per case (shape class), shared by both GPUs
    for name in names:
        assert len(_counted(optuna.load_study(study_name=name, storage=url).trials)) == 6


def test_tune_devices_names_the_gpu_that_failed_and_exits_non_zero(
    tmp_path: Path, log: Path, two_gpus: None
) -> None:
    rc, out, err = _cli(
        "tune",
        "--shapes",
        "1024x1024",
        "--trials",
        "4",
        "--devices",
        "0,1",
        "--db",
        str(tmp_path / "tuning.db"),
        objective=_objective("same", "broken", delay=0.0),
    )
    assert rc == 1
    assert "autotranspose: GPU 1 failed: the measuring process could not start" in err
    assert [line.split()[0] for line in out.splitlines()[2:]] == ["0"]
    assert "tuned 1 of 2 (case, GPU) pairs" in err


def test_tune_devices_with_one_gpu_is_tune_on_that_gpu(
    tmp_path: Path, log: Path, two_gpus: None
) -> None:
    asked: list[int] = []

    def objective(dtype, shape, device, conjugate):
        asked.append(device)
        return device_objective(dtype, shape, device, conjugate)

    db = str(tmp_path / "tuning.db")
    rc, out, err = _cli(
        "tune",
        "--shapes",
        "1024x1024",
        "--trials",
        "3",
        "--devices",
        "1",
        "--db",
        db,
        objective=objective,
    )
    assert rc == 0, err
    assert asked == [1] and out.splitlines()[0].split()[0] == "dtype"
    assert {t.user_attrs["device_index"] for t in _trials(f"sqlite:///{db}")} == {1}


@pytest.mark.parametrize(
    ("argv", "rc", "message"),
    [
        (
            ["--device", "1", "--devices", "all"],
            2,
            "--device and --devices cannot be used together: --device 2 tunes on GPU 2, "
            "--devices 0,2 or --devices all tune on several GPUs at once",
        ),
        (
            ["--devices", "gpu1"],
            2,
            "argument --devices: 'gpu1' is not a list of GPU indices: give all, or indices like 0,2",
        ),
        (["--devices", "1,1"], 2, "argument --devices: '1,1' names GPU 1 more than once"),
        (["--devices", "0,5"], 1, "GPU 5 is not on this machine, which has 2"),
    ],
)
def test_bad_device_options_are_one_line_errors(
    tmp_path: Path, two_gpus: None, argv: list[str], rc: int, message: str
) -> None:
    code, _, err = _cli("tune", "--shapes", "64x64", *argv, "--db", str(tmp_path / "t.db"))
    assert code == rc and f"autotranspose: error: {message}" in err
    assert len(err.strip().splitlines()) == 1


def test_tune_help_says_the_budget_is_shared() -> None:
    text = " ".join(
        cli.build_parser()._subparsers._group_actions[0].choices["tune"].format_help().split()
    )
    assert "--devices all|I,J,..." in text
    assert "with --devices, in total over the GPUs of one model" in text
