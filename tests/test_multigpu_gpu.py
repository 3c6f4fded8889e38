"""`tune --devices all` on real GPUs: one process per GPU, one study, one budget, one best.

Needs two GPUs or more (nvidia-h200-x2). The GPU count comes from the driver (cuInit and
cuDeviceGetCount: no context is created in the test process before the GPUs' processes run).
"""

from __future__ import annotations

import io
import json
from collections import Counter, defaultdict

import numpy as np
import optuna
import pytest
import sqlalchemy as sa
from optuna.trial import TrialState


def _gpu_count() -> int:
    try:
        from autotranspose.runtime.driver import device_count

        return device_count()
    except Exception:
        return 0


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_gpu_count() < 2, reason="needs at least two CUDA GPUs"),
]

SHAPE = (1, 2048, 2048)
TRIALS = 8


def test_tune_devices_all_spends_one_budget_over_every_gpu_and_transpose_serves_the_best(
    tmp_path, monkeypatch
):
    import autotranspose as at
    from autotranspose import cli
    from autotranspose.dispatch import lookup, picker as dispatch
    from autotranspose.kernels.shapes import max_vec, shape_class
    from autotranspose.runtime.compiler import device_info
    from autotranspose.store import Store

    url = f"sqlite:///{tmp_path / 'tuning.db'}"
    out, err = io.StringIO(), io.StringIO()
    rc = cli.run(
        [
            "tune",
            "--shapes",
            "2048x2048",
            "--dtypes",
            "float32",
            "--trials",
            str(TRIALS),
            "--batch",
            "2",
            "--seed",
            "1",
            "--devices",
            "all",
            "--db",
            url,
        ],
        stdout=out,
        stderr=err,
    )
    assert rc == 0, err.getvalue()
    n = _gpu_count()
    for i in range(n):
        assert f"GPU {i}: float32 1x2048x2048: " in err.getvalue()

    # Each GPU's process measured configs, recorded under its own run, and no config twice.
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT r.settings_json, d.name, c.key FROM at_measurements m "
                "JOIN at_runs r ON r.id = m.run_id JOIN at_devices d ON d.id = r.device_id "
                "JOIN at_configs c ON c.id = m.config_id"
            )
        ).all()
    engine.dispose()
    by_gpu = Counter(json.loads(settings)["device_index"] for settings, _, _ in rows)
    assert sorted(by_gpu) == list(range(n)), f"measurements per GPU: {dict(by_gpu)}"
    measured = Counter((name, key) for _, name, key in rows)
    assert max(measured.values()) == 1, "a config was measured twice"

    # One study per GPU model, holding exactly the budget, trials from each of its GPUs.
    models: dict[str, set[int]] = defaultdict(set)
    for i in range(n):
        models[device_info(i).slug].add(i)
    names = optuna.get_all_study_names(url)
    assert sorted(name.split(":")[1] for name in names) == sorted(models)
    results = {}
    for name in names:
        trials = optuna.load_study(study_name=name, storage=url).trials
        counted = [t for t in trials if "status" in t.user_attrs]
        assert len(counted) == TRIALS, f"{name}: {len(counted)} trials for a budget of {TRIALS}"
        assert not [t for t in trials if t.state == TrialState.RUNNING]
        assert {t.user_attrs["device_index"] for t in counted} == models[name.split(":")[1]]
        ok = [t for t in counted if t.state == TrialState.COMPLETE]
        results[name.split(":")[1]] = max(ok, key=lambda t: t.value)

    # The best of each study is stored, and transpose() serves it.
    monkeypatch.setenv("AUTOTRANSPOSE_DB", url)
    lookup.clear_cache()
    cls = shape_class(*SHAPE, max_vec(4, *SHAPE[1:]))
    bests = {}
    with Store.open(url) as store:
        for i in range(n):
            info = device_info(i)
            best = store.best(info.name, 4, cls)
            assert best is not None and best.config.key == results[info.slug].user_attrs["config"]
            choice = lookup.choose(info, 4, cls, store=store)
            assert choice.source == "tuned" and choice.config == best.config
            bests[i] = best.config
    host = np.random.default_rng().standard_normal(SHAPE[1:]).astype(np.float32)
    assert np.array_equal(at.transpose(host), host.T)  # on GPU 0
    used = [
        launch.config
        for key, launch in dispatch.caches.launches.items()
        if key[1] == 4 and key[4:7] == SHAPE
    ]
    assert used == [bests[0]]
