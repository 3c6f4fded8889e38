"""The tuner's logic with a deterministic synthetic objective and real databases (no GPU)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import optuna
import pytest
import sqlalchemy as sa
from _synthetic import (
    DEVICE,
    SyntheticObjective,
    best_in,
    logged,
    score,
    tune_process,
)
from optuna.trial import TrialState

from autotranspose.dispatch import lookup
from autotranspose.errors import ShapeError, TuningError
from autotranspose.kernels.config import (
    KernelConfig,
    cap_steps,
    config_space,
    default_config,
    direct_default,
    narrow_configs,
    seed_config,
)
from autotranspose.kernels.shapes import max_vec, shape_class
from autotranspose.plans.dtypes import element_type
from autotranspose.runtime.device import DeviceInfo
from autotranspose.store import Store
from autotranspose.store.measurement import Measurement
from autotranspose.tuner.study import (
    SearchSpace,
    TuneResult,
    TuneSettings,
    known_good,
    make_sampler,
    study_name,
    tune,
)

pytest_plugins = ("store_fixtures",)

TESTS = Path(__file__).resolve().parent
SHAPE = (1, 2048, 2048)
# A device whose blocks hold at most 32 threads, and complex128 (no vectors): a space of a
# couple of hundred configs, small enough to search to the end.
SMALL = DeviceInfo("Synthetic Small GPU", (9, 0), max_threads_per_block=32)
WIDE = "complex128"


pytestmark = pytest.mark.usefixtures("quiet_optuna")


def _space(
    dtype: str, device: DeviceInfo, shape: tuple[int, int, int] = SHAPE
) -> list[KernelConfig]:
    size = element_type(dtype).size
    vec = max_vec(size, shape[1], shape[2])
    return list(config_space(dtype, device.limits, max_vector=vec))


def _trials(store: Store, result: TuneResult) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=result.study_name, storage=store.url).trials


def _tune(store: Store, objective: SyntheticObjective, **kw) -> TuneResult:
    kw.setdefault("device", objective.device)
    kw.setdefault("trials", 16)
    return tune(
        kw.pop("dtype", "float32"), kw.pop("shape", SHAPE), objective=objective, store=store, **kw
    )


# --- the search space ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "complex128"])
def test_every_config_of_the_space_maps_to_its_own_parameters(dtype: str) -> None:
    space = SearchSpace(config_space(dtype))
    for config in space.configs[:: max(1, len(space) // 300)]:
        assert space.config_for(space.params_of(config)) == config


@pytest.mark.parametrize("dtype", ["int8", "float16"])
def test_tall_and_wide_flat_configs_are_distinct_points_of_a_space(dtype: str) -> None:
    """`wide` is left out of a stored config when False: the space still tells a tall config
    from the wide one with the same other fields (the known-good wide default must be the
    config a trial measures)."""
    space = SearchSpace(config_space(dtype, max_vector=1, short_side=20))
    # the flat byte-permute ones (a staged register transpose is few rows only: no tall twin)
    wide = [
        c for c in space.configs if c.flag("wide") and not c.flag("ordered") and c.kind == "prmt"
    ]
    assert wide and "wide" in space.params_of(wide[0])
    pairs = [(c, c.replace(wide=False)) for c in wide if c.replace(wide=False) in space]
    assert pairs  # a tall config with the same other fields
    ordered = [(c.replace(ordered=True), c) for c in wide if c.replace(ordered=True) in space]
    assert ordered  # `ordered` (left out when False) likewise tells an ordered twin apart
    pairs += ordered
    for config, tall in pairs[:: max(1, len(pairs) // 100)]:
        assert space.config_for(space.params_of(config)) == config
        assert space.config_for(space.params_of(tall)) == tall


def test_a_space_without_wide_configs_keeps_its_parameters() -> None:
    space = SearchSpace(config_space("float32", max_vector=4))
    assert not any(name.startswith("wide") for name in space.distributions)


def test_invalid_parameter_combinations_are_repaired_to_the_nearest_valid_config() -> None:
    space = SearchSpace(config_space("int8"))
    rng = np.random.default_rng(0)
    repaired = 0
    for _ in range(300):
        params = {}
        for name, dist in space.distributions.items():
            if isinstance(dist, optuna.distributions.IntDistribution):
                params[name] = int(rng.integers(dist.low, dist.high + 1))
            else:
                params[name] = dist.choices[int(rng.integers(len(dist.choices)))]
        config = space.config_for(params)
        assert config in space
        assert space.config_for(params) == config  # deterministic
        repaired += space.params_of(config) != params
    assert repaired > 0  # the product of the choices holds invalid combinations


def test_taken_configs_are_avoided_until_none_is_left() -> None:
    space = SearchSpace(_space(WIDE, SMALL))
    params = space.params_of(space.configs[0])
    taken: set[str] = set()
    for _ in range(len(space)):
        config = space.config_for(params, taken)
        assert config.key not in taken
        taken.add(config.key)
    assert taken == {c.key for c in space.configs}
    assert space.config_for(params, taken) == space.configs[0]  # all taken: the exact one


def test_a_space_without_configs_is_an_error() -> None:
    with pytest.raises(TuningError, match="empty"):
        SearchSpace([])


def test_study_names_say_device_element_size_and_shape_class() -> None:
    cls = shape_class(1, 8192, 8192, 4)
    space = SearchSpace(config_space("complex64", conjugate=True))
    name = study_name(DEVICE, 8, cls, space, conjugate=True)
    assert name.startswith("autotranspose:Synthetic_GPU_9000:s8:conj:1x8192x8192/v4:")
    assert study_name(DEVICE, 8, cls, space, conjugate=True) == name


def test_samplers() -> None:
    assert isinstance(make_sampler("tpe", 1), optuna.samplers.TPESampler)
    assert isinstance(make_sampler("random", 1), optuna.samplers.RandomSampler)
    with pytest.raises(TuningError, match="unknown sampler 'nope'"):
        make_sampler("nope")


_BAD_SEEDS = [-1, -(2**40), 2**32, 2**64, 1.5, 3.0, "7", True, np.int64(-3)]


@pytest.mark.parametrize("seed", _BAD_SEEDS, ids=repr)
def test_a_bad_seed_is_refused_before_any_study(db: Store, seed) -> None:
    """A seed NumPy cannot take failed deep inside the sampler; now a TuningError that says
    what to give, and no study is made."""
    with pytest.raises(TuningError, match=r"seed must be an int from 0 to 2\*\*32-1.*None"):
        _tune(db, SyntheticObjective(), trials=4, seed=seed)
    assert optuna.get_all_study_names(db.url) == []


@pytest.mark.parametrize("seed", [-1, 2**32, 0.5])
def test_tune_gpu_refuses_a_bad_seed_before_opening_anything(tmp_path: Path, seed) -> None:
    """No GPU is needed to be told: the settings are checked before the database and the
    measuring process."""
    from autotranspose.tuner.study import tune_gpu

    with pytest.raises(TuningError, match="seed must be an int from 0 to"):
        tune_gpu("float32", (64, 64), db=f"sqlite:///{tmp_path / 'tuning.db'}", seed=seed)
    assert not (tmp_path / "tuning.db").exists()


@pytest.mark.parametrize("seed", [0, 2**32 - 1, np.uint32(2**32 - 1), np.int64(12345)], ids=repr)
def test_seeds_at_the_bounds_are_taken(db: Store, seed) -> None:
    result = _tune(db, SyntheticObjective(), trials=4, seed=seed)
    assert result.measured == 4


# --- searching ----------------------------------------------------------------------------------
def test_finds_the_known_optimum(db: Store) -> None:
    space = _space(WIDE, SMALL)
    objective = SyntheticObjective(SMALL, space=space)
    result = _tune(db, objective, dtype=WIDE, trials=120, seed=0)
    assert result.config == best_in(space)
    assert result.measurement == score(best_in(space))
    assert result.shape_class == shape_class(*SHAPE, 1)
    entry = db.best(SMALL.name, 16, result.shape_class)
    assert entry is not None and entry.config == result.config


def test_gets_close_to_the_optimum_of_a_large_space_in_40_trials(db: Store) -> None:
    space = _space("float32", DEVICE)
    result = _tune(db, SyntheticObjective(space=space), trials=40, seed=3)
    assert result.measurement.gbps >= 0.85 * score(best_in(space)).gbps
    assert result.measured == 40 and result.reused == 0


def test_invalid_configs_never_reach_the_objective(db: Store) -> None:
    device = DeviceInfo("Tiny GPU", (8, 0), max_threads_per_block=64, max_shared_per_block=4096)
    space = _space("float32", device)
    objective = SyntheticObjective(device, space=space)  # asserts membership of every config
    _tune(db, objective, trials=48, seed=1, sampler="random")
    assert len(objective.calls) == 48
    assert all(c.fits(device.limits) for c in objective.calls)


def test_no_config_is_measured_twice_and_each_batch_is_precompiled(db: Store) -> None:
    objective = SyntheticObjective()
    result = _tune(db, objective, trials=40, seed=2, batch=8)
    keys = [c.key for c in objective.calls]
    assert len(keys) == len(set(keys)) == 40
    assert objective.precompiled == objective.batches
    assert [len(b) for b in objective.batches] == [8] * 5
    trials = _trials(db, result)
    assert [t.user_attrs["config"] for t in trials] == keys


def test_known_good_configs_are_measured_first(db: Store) -> None:
    cls = shape_class(1, *SHAPE[1:], max_vec(4, *SHAPE[1:]))
    tuned = KernelConfig(4, 32, 64, 2, 2, 1, "pad", "col", "stream")
    # A tuned result of a nearby class: lookup serves it, so the study measures it early.
    run = db.begin_run(DEVICE, {})
    db.record(
        run,
        DEVICE,
        "float32",
        4,
        (1, 4096, 4096),
        shape_class(1, 4096, 4096, 4),
        tuned,
        score(tuned),
    )
    # the direct kernel for the tuned shape before it (the seed documents' strategy, capped)
    expected = [
        seed_config(4),
        default_config(4, max_vector=cls.vec),
        direct_default(4, *SHAPE[1:]),
        tuned,
    ]
    good = known_good(
        4, cls, SearchSpace(_space("float32", DEVICE)), device=DEVICE, store=db, sides=SHAPE[1:]
    )
    assert good[:4] == expected
    # then the nearest classes' bests of the GPU models that ship results (H100, H200)
    shipped = {e.config for e in lookup.shipped_everywhere() if e.elem_bytes == 4}
    assert len(good) > 4 and set(good[4:]) <= shipped
    objective = SyntheticObjective()
    _tune(db, objective, trials=len(good), seed=0)
    assert objective.calls == good


@pytest.mark.parametrize("shape", [(1, 3_000_017, 5), (1, 6, 20_000_003)])
def test_known_good_configs_hold_the_narrow_tiles_for_a_side_of_at_most_8(shape) -> None:
    cls = shape_class(*shape, max_vec(4, *shape[1:]))
    # the tuner's space for the class (its short side brings the narrow tiles)
    space = SearchSpace(
        config_space("float32", DEVICE.limits, max_vector=cls.vec, short_side=min(cls.m, cls.n))
    )
    good = known_good(4, cls, space, device=DEVICE, sides=shape[1:])
    narrow = narrow_configs(4, *shape[1:])
    assert len(narrow) == 2 and set(narrow) <= set(good)


def test_warm_starts_take_other_gpu_models_results(db: Store) -> None:
    other = DeviceInfo("Other GPU 7000", (9, 0), multiprocessors=100)
    theirs = KernelConfig(4, 128, 32, 4, 4, 0, "swizzle", "col", "default")
    run = db.begin_run(other, {})
    db.record(run, other, "float32", 4, SHAPE, shape_class(*SHAPE, 4), theirs, score(theirs))
    cls = shape_class(*SHAPE, 4)
    assert theirs in lookup.warm_starts(DEVICE, 4, cls, store=db)
    assert theirs in known_good(
        4, cls, SearchSpace(_space("float32", DEVICE)), device=DEVICE, store=db
    )


@pytest.mark.parametrize("dtype", ["int8", "float32", "complex128"])
def test_neighbours_are_one_field_one_step_away(dtype: str) -> None:
    space = SearchSpace(config_space(dtype, max_vector=2, short_side=32))
    rng = np.random.default_rng()
    for i in rng.choice(len(space), 20, replace=False):
        config = space.configs[int(i)]
        near = space.neighbours(config)
        assert near and config not in near
        base = space.params_of(config)
        for other in near:
            params = space.params_of(other)
            moved = [k for k in base if params[k] != base[k]]
            assert len(moved) == 1
            k = moved[0]
            if k == "min_blocks_rank":  # a cap step: blocks per SM depend on the threads
                assert other.min_blocks in (0, *cap_steps(config))
            elif k.endswith("_rank"):
                assert abs(params[k] - base[k]) == 1


def test_the_last_trials_step_from_the_best_to_the_optimum(db: Store) -> None:
    """A warm start one step from the optimum (another class's best): the local search of
    the last trials finds the optimum, which sampling alone rarely hits in 40 trials."""
    space = _space("float32", DEVICE)
    best = best_in(space)
    near = next(c for c in SearchSpace(space).neighbours(best) if score(c).ok)
    run = db.begin_run(DEVICE, {})
    db.record(
        run, DEVICE, "float32", 4, (1, 4096, 4096), shape_class(1, 4096, 4096, 4), near, score(near)
    )
    result = _tune(db, SyntheticObjective(space=space), trials=40, seed=5)
    assert result.config == best


def test_the_local_search_takes_two_fields_at_once_past_a_local_optimum(db: Store) -> None:
    """A warm start every single step from which is slower (a local optimum), and the best a
    tile_m and a tile_n step away together: once the single steps are spent the local search
    tries the two-field steps and finds it."""
    space = _space("float32", DEVICE)
    local = best_in(space)
    pairs = SearchSpace(space).pair_steps(local)
    assert pairs
    top = pairs[0]
    run = db.begin_run(DEVICE, {})
    db.record(
        run,
        DEVICE,
        "float32",
        4,
        (1, 4096, 4096),
        shape_class(1, 4096, 4096, 4),
        local,
        score(local),
    )
    objective = SyntheticObjective(space=space, gbps={top.key: 3300.0})
    result = _tune(db, objective, trials=40, seed=3)
    assert result.config == top


def test_known_good_configs_the_device_cannot_run_are_left_out() -> None:
    cls = shape_class(1, *SHAPE[1:], 4)
    space = SearchSpace(_space("float32", SMALL))
    good = known_good(4, cls, space, device=SMALL, store=None)
    assert all(c in space for c in good)
    assert default_config(4, max_vector=4) not in good  # 256 threads: more than SMALL allows


def test_failed_and_wrong_configs_end_as_failed_trials_with_their_reasons(db: Store) -> None:
    seed, default = seed_config(4), default_config(4, max_vector=4)
    objective = SyntheticObjective(
        fail={seed.key: "nvcc: ptxas error: too much shared data"},
        wrong={default.key},  # reported at 9000 GB/s: it must never become the best
    )
    result = _tune(db, objective, trials=12, seed=0)
    by_key = {t.user_attrs["config"]: t for t in _trials(db, result)}
    assert by_key[seed.key].state == TrialState.FAIL
    assert by_key[seed.key].user_attrs["status"] == "fail"
    assert "ptxas error" in by_key[seed.key].user_attrs["error"]
    assert by_key[default.key].state == TrialState.FAIL
    assert by_key[default.key].user_attrs["status"] == "wrong"
    assert by_key[default.key].user_attrs["error"]
    assert result.config not in (seed, default) and result.measurement.ok
    assert result.failed >= 2
    assert db.measured(DEVICE.name, 4, SHAPE, seed).status == "fail"
    assert db.measured(DEVICE.name, 4, SHAPE, default).status == "wrong"
    best = db.best(DEVICE.name, 4, result.shape_class)
    assert best is not None and best.config == result.config
    ok = [t for t in by_key.values() if t.state == TrialState.COMPLETE]
    assert all(0 < t.user_attrs["ratio"] < 1 for t in ok)


def test_no_correct_config_is_a_tuning_error(db: Store) -> None:
    space = _space(WIDE, SMALL)
    objective = SyntheticObjective(SMALL, fail={c.key: "launch failed" for c in space})
    with pytest.raises(TuningError, match=r"no config ran correctly.*launch failed"):
        _tune(db, objective, dtype=WIDE, trials=5)


def test_stops_after_patience_trials_without_improvement(db: Store) -> None:
    seed = seed_config(4)
    # The first trial is the best there will be: everything else is slower.
    objective = SyntheticObjective(gbps={seed.key: 9999.0})
    result = _tune(db, objective, trials=100, patience=6, batch=4, seed=0)
    assert result.stopped_by == "patience"
    assert result.trials == 7 and len(objective.calls) == 7
    assert result.config == seed


def test_stops_at_the_timeout(db: Store) -> None:
    objective = SyntheticObjective(delay=0.05)
    started = time.monotonic()
    result = _tune(db, objective, trials=1000, timeout=1.0, batch=4, seed=0)
    assert result.stopped_by == "timeout"
    assert time.monotonic() - started < 5
    assert 4 <= result.trials < 40


def test_a_timeout_shorter_than_the_setup_still_measures_one_batch(db: Store) -> None:
    """On a busy machine the setup can outlast a short timeout: the run still measures one
    batch and returns its best, not "no config ran correctly"."""
    objective = SyntheticObjective()
    result = _tune(db, objective, trials=1000, timeout=1e-6, batch=4, seed=0)
    assert result.stopped_by == "timeout" and 1 <= result.trials <= 4 and result.config is not None


def test_stops_when_every_config_was_tried(db: Store) -> None:
    space = _space(WIDE, SMALL)
    objective = SyntheticObjective(SMALL, space=space)
    result = _tune(db, objective, dtype=WIDE, trials=len(space) + 50, batch=16, seed=0)
    assert result.stopped_by == "exhausted"
    assert sorted(c.key for c in objective.calls) == sorted(c.key for c in space)
    assert result.config == best_in(space)


def test_a_seed_makes_runs_reproducible(tmp_path: Path) -> None:
    runs = []
    for name in ("a", "b"):
        with Store.open(tmp_path / f"{name}.db") as store:
            objective = SyntheticObjective()
            _tune(store, objective, trials=24, seed=7)
            runs.append([c.key for c in objective.calls])
    assert runs[0] == runs[1]


def test_running_again_resumes_without_measuring_again(db: Store) -> None:
    first = SyntheticObjective()
    r1 = _tune(db, first, trials=16, seed=0)
    again = SyntheticObjective()
    r2 = _tune(db, again, trials=16, seed=0)
    assert r2.trials == 0 and again.calls == [] and r2.config == r1.config
    more = SyntheticObjective()
    r3 = _tune(db, more, trials=28, seed=0)
    assert r3.trials == 12 and len(more.calls) == 12
    assert not {c.key for c in more.calls} & {c.key for c in first.calls}
    assert r3.measurement.gbps >= r1.measurement.gbps


def test_stored_measurements_are_reused_not_measured(db: Store) -> None:
    # A measurement stored, but whose trial never finished (the process died in between).
    config = seed_config(4)
    cls = shape_class(1, *SHAPE[1:], 4)
    db.record(None, DEVICE, "float32", 4, SHAPE, cls, config, Measurement("ok", 1234.0, 3300.0))
    objective = SyntheticObjective()
    result = _tune(db, objective, trials=4, seed=0)
    assert config not in objective.calls
    assert result.reused == 1 and result.measured == 3
    trial = next(t for t in _trials(db, result) if t.user_attrs["config"] == config.key)
    assert trial.value == 1234.0 and trial.user_attrs["reused"] is True


def test_each_shape_of_a_class_is_measured_on_its_own(db: Store) -> None:
    a, b = (1, 2048, 2048), (1, 2000, 2000)  # one class: 1x2048x2048/v4
    ra = _tune(db, SyntheticObjective(), shape=a, trials=8, seed=0)
    objective = SyntheticObjective()
    rb = _tune(db, objective, shape=b, trials=8, seed=0)
    assert ra.study_name == rb.study_name and rb.shape_class == ra.shape_class
    assert rb.trials == 8 and len(objective.calls) == 8


def test_a_broken_objective_leaves_no_running_trial_and_no_claim(db: Store) -> None:
    class Broken(SyntheticObjective):
        def __call__(self, configs):
            raise RuntimeError("the worker died")

    with pytest.raises(RuntimeError, match="the worker died"):
        _tune(db, Broken(), trials=8, seed=0)
    study = optuna.load_study(study_name=optuna.get_all_study_names(db.url)[0], storage=db.url)
    assert {t.state for t in study.trials} == {TrialState.FAIL}
    assert all("interrupted" in t.user_attrs["error"] for t in study.trials)
    objective = SyntheticObjective()  # the claims were released: the next run measures them
    result = _tune(db, objective, trials=8, seed=0)
    assert result.measured == 8


@pytest.mark.parametrize("at", [1, 4, 23])
def test_ctrl_c_while_a_trial_is_asked_leaves_no_running_trial(db: Store, at: int) -> None:
    """CI saw it in the multi-GPU Ctrl-C test: an interrupt inside Optuna's ask left the new
    trial RUNNING, owned by nobody, until a later run failed it as stale. (The first trials
    are the queued known-good configs, which are not sampled: 40 trials reach the sampler.)
    The Ctrl-C is sent in a process of its own (`_synthetic.ctrl_c_tune_process`): sent to
    the test process, it could land in other code that runs there (JAX's gc callback)."""
    code = f"from _synthetic import ctrl_c_tune_process; ctrl_c_tune_process({db.url!r}, {at})"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    child = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout.strip().splitlines()[-1])
    assert report["raised"] and report["calls"] >= at, report
    study = optuna.load_study(study_name=optuna.get_all_study_names(db.url)[0], storage=db.url)
    assert [t.number for t in study.trials if t.state == TrialState.RUNNING] == []
    assert any("interrupted" in t.user_attrs.get("error", "") for t in study.trials)
    objective = SyntheticObjective()  # resumes: nothing waits on a dead trial's claim
    result = _tune(db, objective, trials=40, batch=2, seed=1)
    counted = [t for t in _trials(db, result) if "status" in t.user_attrs]
    assert len(counted) == 40 and result.measured == len(objective.calls)


def test_an_objective_returning_the_wrong_count_is_an_error(db: Store) -> None:
    class Short(SyntheticObjective):
        def __call__(self, configs):
            return super().__call__(configs)[:-1]

    with pytest.raises(TuningError, match="one Measurement per config"):
        _tune(db, Short(), trials=4)


@pytest.mark.parametrize(
    "kw",
    [{"trials": 0}, {"timeout": -1}, {"patience": 0}, {"batch": 0}, {"sampler": "cmaes"}],
)
def test_bad_settings_are_errors(db: Store, kw: dict) -> None:
    with pytest.raises(TuningError):
        _tune(db, SyntheticObjective(), **kw)


def test_settings_come_as_keywords_or_as_one_value_not_both() -> None:
    settings = TuneSettings(trials=8, seed=3)
    assert TuneSettings.of(None, trials=8, seed=3) == settings
    assert TuneSettings.of(settings, trials=40) is settings  # keywords at their defaults
    with pytest.raises(TuningError, match=r"not both \(settings and trials, batch were given\)"):
        TuneSettings.of(settings, trials=9, batch=2)
    with pytest.raises(TuningError, match="settings must be a TuneSettings"):
        TuneSettings.of({"trials": 8})  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        settings.trials = 1  # type: ignore[misc]


def test_each_process_of_a_shared_study_gets_a_seed_of_its_own() -> None:
    assert TuneSettings().for_process(3).seed is None
    assert TuneSettings(seed=5).for_process(0) == TuneSettings(seed=5)
    assert TuneSettings(seed=2**32 - 2, trials=7).for_process(3) == TuneSettings(seed=1, trials=7)


def test_tune_takes_its_settings_as_one_value(db: Store) -> None:
    objective = SyntheticObjective()
    settings = TuneSettings(trials=6, batch=3, seed=0)
    result = tune("float32", SHAPE, objective=objective, store=db, device=DEVICE, settings=settings)
    assert result.trials == 6 and max(len(batch) for batch in objective.batches) <= 3
    engine = sa.create_engine(db.url)
    with engine.connect() as conn:
        (text,) = conn.execute(sa.text("SELECT settings_json FROM at_runs")).scalars().all()
    engine.dispose()
    recorded = json.loads(text)
    assert {
        k: recorded[k] for k in ("trials", "timeout", "patience", "sampler", "seed", "batch")
    } == {
        "trials": 6,
        "timeout": None,
        "patience": None,
        "sampler": "tpe",
        "seed": 0,
        "batch": 3,
    }


def test_bad_shapes_are_errors(db: Store) -> None:
    with pytest.raises(ShapeError):
        _tune(db, SyntheticObjective(), shape=(0, 5))


_SCRIPT = """
import autotranspose as at
{guard}at.tune_gpu("float32", (256, 256), trials=1, db={db!r})
"""


@pytest.mark.parametrize("guarded", [False, True])
def test_tune_gpu_at_the_top_level_of_a_script_says_to_add_a_main_guard(
    tmp_path: Path, guarded: bool
) -> None:
    """The measuring process is spawned: it re-imports the script. Without the guard the
    child says so in one line and the script's error names the fix (no GPU needed: both
    happen before the worker touches one)."""
    script = tmp_path / "tune_me.py"
    guard = 'if __name__ == "__main__":\n    ' if guarded else ""
    script.write_text(_SCRIPT.format(guard=guard, db=f"sqlite:///{tmp_path / 't.db'}"))
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    if guarded:  # here: no GPU, so the worker's own error; never the guard advice
        assert "__main__" not in done.stderr
        return
    assert (
        last.startswith("autotranspose.errors.TuningError: ")
        and 'if __name__ == "__main__":' in last
    )
    assert done.stderr.count("Traceback") == 1  # the script's own; the child printed one line
    assert "bootstrapping phase" not in done.stderr and "EOFError" not in done.stderr


def test_progress_reports_every_trial(db: Store) -> None:
    reports = []
    _tune(db, SyntheticObjective(), trials=10, batch=4, seed=0, progress=reports.append)
    assert [r.done for r in reports] == list(range(1, 11))
    assert all(r.total == 10 for r in reports)
    best = [r.best_gbps for r in reports]
    assert best == sorted(best) and best[-1] > 0


def test_lookup_serves_the_result_right_after_tuning(db: Store) -> None:
    cls = shape_class(1, *SHAPE[1:], 4)
    assert lookup.choose(DEVICE, 4, cls, store=db).source == "default"  # cached now
    result = _tune(db, SyntheticObjective(), trials=8, seed=0)
    choice = lookup.choose(DEVICE, 4, cls, store=db)
    assert choice.source == "tuned" and choice.config == result.config


def test_conjugate_studies_tune_conjugating_kernels(db: Store) -> None:
    objective = SyntheticObjective()
    result = _tune(db, objective, dtype="complex64", trials=8, seed=0, conjugate=True)
    assert all(c.conjugate and c.elem_bytes == 8 for c in objective.calls)
    assert ":s8:conj:" in result.study_name


# --- storage: Optuna's tables beside ours, resume after a kill, several processes ----------------
def test_optuna_and_our_tables_share_one_database(db: Store, tmp_path: Path) -> None:
    result = _tune(db, SyntheticObjective(), trials=8, seed=0)
    assert optuna.get_all_study_names(db.url) == [result.study_name]
    with Store.open(db.url) as again:  # still ours: Optuna's tables are not foreign
        assert again.best(DEVICE.name, 4, result.shape_class) is not None
    import autotranspose.store as store_pkg

    assert store_pkg.upgrade(db.url)


def test_tunes_on_a_sqlite_database_in_memory() -> None:
    """Optuna's engine on it is left as Optuna makes it (only a file is shared by processes,
    and each new connection to memory is an empty database)."""
    with Store.open("sqlite://") as store:
        assert _tune(store, SyntheticObjective(), trials=4, seed=0).trials == 4


def test_a_killed_run_resumes_without_measuring_twice(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    log = tmp_path / "measured.log"
    Store.open(url).close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    victim = subprocess.Popen(
        [sys.executable, str(TESTS / "_synthetic.py"), url, str(log), "40", "0.05"], env=env
    )
    try:
        deadline = time.monotonic() + 60
        while len(logged(log)) < 10 and victim.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert victim.poll() is None, "the tuning process ended before it could be killed"
        victim.send_signal(signal.SIGKILL)
    finally:
        victim.wait()
    before = logged(log)
    assert len({k for _, k in before}) == len(before)
    with Store.open(url) as store:
        space = SearchSpace(_space("float32", DEVICE))
        stored = {k for _, k in before if store.measured(DEVICE.name, 4, SHAPE, space.by_key(k))}
        assert stored, "nothing was stored before the kill"
        time.sleep(2.5)  # the killed process's trials go stale (grace period: 2 s)
        tune_process(url, str(log), trials=40)
        after = logged(log)[len(before) :]
        assert not stored & {k for _, k in after}, "a stored measurement was measured again"
        assert len({k for _, k in after}) == len(after)
        name = optuna.get_all_study_names(url)[0]
        trials = optuna.load_study(study_name=name, storage=url).trials
        assert not [t for t in trials if t.state == TrialState.RUNNING]
        assert [t for t in trials if t.state == TrialState.FAIL and "status" not in t.user_attrs]
        counted = [t for t in trials if "status" in t.user_attrs]
        assert len(counted) == 40
        for _, key in before + after:  # every measurement ended up in the store
            assert store.measured(DEVICE.name, 4, SHAPE, space.by_key(key)) is not None


def _run_processes(url: str, log: Path, n: int, **kw) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=tune_process, args=(url, str(log)), kwargs=kw) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0] * n


def _shared_study(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, Path]:
    """A created tuning database of `backend` for processes to share, and their measure log."""
    url = str(tmp_path / "tuning.db") if backend == "sqlite" else request.getfixturevalue("pg_url")
    with Store.open(url) as store:
        return store.url, tmp_path / "measured.log"


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_processes_share_a_study_without_measuring_a_config_twice(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url, log = _shared_study(backend, tmp_path, request)
    # Batches outlast the grace period (8 x 0.6 s > 4 s): only the heartbeat keeps each
    # process's running trials from being failed as stale by the other. The grace period is
    # 4 beats, not 2: on a loaded CI machine a beat (a write contended with the other
    # process's) was once over a second late and a live trial was taken over.
    _run_processes(url, log, 2, trials=40, delay=0.6, seed=None, batch=8, grace_period=4)
    measured = logged(log)
    counts = Counter(k for _, k in measured)
    assert counts and max(counts.values()) == 1, "a config was measured twice"
    assert len({pid for pid, _ in measured}) == 2, "one process did all the work"
    space = SearchSpace(_space("float32", DEVICE))
    with Store.open(url) as store:
        for key in counts:
            assert store.measured(DEVICE.name, 4, SHAPE, space.by_key(key)) is not None
        name = optuna.get_all_study_names(url)[0]
        trials = optuna.load_study(study_name=name, storage=url).trials
        uncounted = [t for t in trials if "status" not in t.user_attrs]
        odd = [(t.number, t.state.name, t.user_attrs) for t in uncounted if not _over_budget(t)]
        assert not odd, f"trials ended without a measurement for another reason: {odd}"
        assert len(trials) - len(uncounted) == 40
        best = store.best(DEVICE.name, 4, shape_class(1, 2048, 2048, 4))
        assert best is not None and best.gbps == max(
            score(space.by_key(k)).gbps for k in counts if score(space.by_key(k)).ok
        )


def test_steps_queued_for_a_spent_budget_do_not_wait_in_the_study(db: Store) -> None:
    """Processes sharing a study may each queue steps for the last places of the budget (CI
    once left five WAITING); the run that finds the budget spent ends its shape's queue, and
    leaves another shape's alone."""
    first = _tune(db, SyntheticObjective(), trials=8, seed=0)
    study = optuna.load_study(study_name=first.study_name, storage=db.url)
    space = SearchSpace(_space("float32", DEVICE))
    rng = np.random.default_rng()
    picks = [space.configs[i] for i in rng.choice(len(space), size=3, replace=False)]
    for config, shape in zip(picks, ["1x2048x2048", "1x2048x2048", "1x2048x2080"], strict=True):
        study.enqueue_trial(
            space.params_of(config), user_attrs={"config": config.key, "shape": shape}
        )
    again = _tune(db, SyntheticObjective(), trials=8, seed=1)
    assert again.stopped_by == "trials"
    left = optuna.load_study(study_name=first.study_name, storage=db.url).trials[-3:]
    assert [t.state for t in left] == [TrialState.FAIL, TrialState.FAIL, TrialState.WAITING]
    assert all(_over_budget(t) for t in left[:2]) and "error" not in left[2].user_attrs


def _over_budget(trial: optuna.trial.FrozenTrial) -> bool:
    return "over the trial budget" in trial.user_attrs.get("error", "")


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_processes_started_together_spend_the_trial_budget_once(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # Each process may ask a whole budget in its first batch: both see an empty study.
    url, log = _shared_study(backend, tmp_path, request)
    _run_processes(url, log, 2, trials=8, delay=0.05, seed=None, batch=8, grace_period=4)
    counts = Counter(k for _, k in logged(log))
    assert max(counts.values()) == 1, "a config was measured twice"
    name = optuna.get_all_study_names(url)[0]
    trials = optuna.load_study(study_name=name, storage=url).trials
    counted = [t for t in trials if "status" in t.user_attrs]
    assert len(counted) == 8, f"{len(counted)} trials for a budget of 8"
    assert sum(counts.values()) + sum(bool(t.user_attrs.get("reused")) for t in counted) == 8
    assert all(_over_budget(t) for t in trials if t not in counted)


@pytest.mark.postgres
def test_tunes_on_postgresql(pg_url: str) -> None:
    with Store.open(pg_url) as store:
        objective = SyntheticObjective()
        result = _tune(store, objective, trials=16, seed=0)
        assert optuna.get_all_study_names(store.url) == [result.study_name]
        assert store.best(DEVICE.name, 4, result.shape_class).config == result.config
        assert _tune(store, SyntheticObjective(), trials=16, seed=0).trials == 0


def test_a_trial_another_process_ended_right_after_the_ask_is_skipped(
    db: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected interleaving: another process ends a trial between this run's ask and its
    first write to it (a queued trial two processes popped at once, or one failed as
    stale). The run skips it and still spends its whole budget on trials of its own."""
    from autotranspose.tuner.study.run import Run
    from autotranspose.tuner.study.storage import trial_id

    ended: list[int] = []
    owns = Run.owns

    def ended_by_another(self, trial):  # type: ignore[no-untyped-def]
        if len(ended) < 3 and trial.number % 2 == 1:
            self.storage.set_trial_state_values(trial_id(trial), TrialState.FAIL)
            ended.append(trial.number)
        return owns(self, trial)

    monkeypatch.setattr(Run, "owns", ended_by_another)
    result = _tune(db, SyntheticObjective(), trials=8, batch=2)
    assert len(ended) == 3
    trials = _trials(db, result)
    measured = [t for t in trials if "status" in t.user_attrs]  # measured: ok or failing
    assert len(measured) == 8 and not {t.number for t in measured} & set(ended)
    assert all(t.state == TrialState.FAIL for t in trials if t.number in ended)


def test_a_queued_trial_another_process_ended_during_the_ask_is_skipped(
    db: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected interleaving: another process ended the queued trial this ask popped (it
    dropped it as over the budget) while the ask was still writing its parameters, so the
    ask itself raises. The run asks again and spends its whole budget."""
    ended: list[int] = []
    ask = optuna.Study.ask

    def ended_during_the_ask(self, fixed_distributions=None):  # type: ignore[no-untyped-def]
        if len(ended) < 2:
            trial = ask(self, fixed_distributions)
            self._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            ended.append(trial.number)
            raise optuna.exceptions.UpdateFinishedTrialError(
                f"Trial#{trial.number} has already finished and can not be updated."
            )
        return ask(self, fixed_distributions)

    monkeypatch.setattr(optuna.Study, "ask", ended_during_the_ask)
    result = _tune(db, SyntheticObjective(), trials=8, batch=2)
    assert len(ended) == 2
    trials = _trials(db, result)
    measured = [t for t in trials if "status" in t.user_attrs]
    assert len(measured) == 8 and not {t.number for t in measured} & set(ended)
