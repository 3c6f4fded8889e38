"""Cast-transposes tuned like transposes: their results keyed by problem (pair and output set)
beside the transposes', validated on the way out, served by lookup, searched by the tuner."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command
from store_data import H100 as _H100, valid_config

from autotranspose.dispatch import lookup
from autotranspose.dispatch.cast import cast_class
from autotranspose.errors import StoreError, TuningError
from autotranspose.kernels.config import KernelConfig
from autotranspose.kernels.shapes import ShapeClass
from autotranspose.kinds import cast as cast_kind
from autotranspose.plans.cast import plan_cast
from autotranspose.runtime.device import DeviceInfo
from autotranspose.store import BadRowWarning, Store, migrations, resolve_url, textio, upgrade
from autotranspose.store.measurement import Measurement
from autotranspose.tuner.study.cast import (
    cast_space,
    cast_study_name,
    cast_target,
    parse_pair,
    tune_cast,
)
from autotranspose.tuner.study.settings import TuneSettings

pytest_plugins = ("store_fixtures",)
pytestmark = pytest.mark.usefixtures("isolated_home")

BF16, F32, E4M3 = cast_kind.BFLOAT16, cast_kind.FLOAT32, cast_kind.E4M3
# a GPU model no shipped file is for: what lookup serves comes from the test's store alone
H100 = DeviceInfo.from_dict({**_H100.to_dict(), "name": "Cast Test GPU 80GB"})
CLS = ShapeClass(1, 8192, 8192, 8)


def _variant(rng, src=BF16, dst=E4M3) -> KernelConfig:
    """A random config of the pair's space other than its default."""
    configs = [
        c for c in cast_kind.space(KernelConfig, src, dst)
        if c != cast_kind.default(KernelConfig, src, dst)
    ]  # fmt: skip
    return configs[int(rng.integers(len(configs)))]


def _ok(rng) -> Measurement:
    copy = float(rng.uniform(2500, 3200))
    return Measurement("ok", float(rng.uniform(0.5, 0.95)) * copy, copy, 10.0)


# --- keys --------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", sorted(cast_kind.PAIRS))
@pytest.mark.parametrize("both", [False, True])
def test_problem_keys_round_trip(code, both):
    text = cast_kind.problem(code, both)
    assert cast_kind.parse_problem(text) == (code, both)
    assert len(text) <= 40  # the column's width


@pytest.mark.parametrize(
    "text", ["cast:", "cast:bf16_int8", "bf16_e4m3", "cast:bf16_e4m3+both+both", 7, None, "x" * 80]
)
def test_malformed_problems_are_refused(text):
    with pytest.raises(ValueError, match="problem"):
        cast_kind.parse_problem(text)
    assert cast_kind.parse_problem("") is None  # a transpose


def test_a_cast_and_a_transpose_of_one_class_keep_their_own_bests(store, rng):
    """Same device, element size and class: the problem keeps them apart, in the bests and
    in the tuner's "measured already?"."""
    cast_cfg, cast_m = _variant(rng), _ok(rng)
    problem = cast_kind.problem(cast_cfg.params.pair)
    both = cast_kind.problem(cast_cfg.params.pair, True)
    shape = (1, 8192, 8192)
    store.record(None, H100, "bfloat16", 2, shape, CLS, cast_cfg, cast_m, problem=problem)
    plain = valid_config(2, 8)
    store.record(None, H100, "bfloat16", 2, shape, CLS, plain, _ok(rng))
    assert {e.problem for e in store.entries()} == {"", problem}
    (t,) = store.entries(H100.name, problem="")
    assert t.config == plain
    got = store.best(H100.name, 2, CLS, problem)
    assert got.config == cast_cfg and got.gbps == pytest.approx(cast_m.gbps)
    assert store.best(H100.name, 2, CLS, both) is None
    assert store.measured(H100.name, 2, shape, cast_cfg, problem=problem).gbps == cast_m.gbps
    assert store.measured(H100.name, 2, shape, cast_cfg, problem=both) is None
    assert store.measured(H100.name, 2, shape, cast_cfg) is None  # not a transpose's


def test_a_cast_config_under_another_problem_is_not_recorded(store, rng):
    cfg = _variant(rng)
    with pytest.raises(StoreError, match="stored as a transpose"):
        store.record(None, H100, "bfloat16", 2, (1, 8192, 8192), CLS, cfg, _ok(rng))
    with pytest.raises(StoreError, match="is the cast bf16_e5m2"):
        store.record(
            None, H100, "bfloat16", 2, (1, 8192, 8192), CLS, cfg, _ok(rng),
            problem=cast_kind.problem("bf16_e5m2"),
        )  # fmt: skip


def test_a_tampered_row_is_skipped_with_a_warning_naming_it(store, rng):
    """A cast config whose row was changed to a transpose's problem never reaches a
    transpose call: the row is skipped, named, and the fix said."""
    cfg = _variant(rng)
    store.record(
        None, H100, "bfloat16", 2, (1, 8192, 8192), CLS, cfg, _ok(rng),
        problem=cast_kind.problem(cfg.params.pair),
    )  # fmt: skip
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE at_best SET problem = ''"))
    with pytest.warns(BadRowWarning, match="stored as a transpose's result"):
        assert store.entries() == []
    lookup.clear_cache()
    with pytest.warns(BadRowWarning):
        assert lookup.choose(H100, 2, CLS, store=store).source == "default"


# --- files ------------------------------------------------------------------------------------
def _file(store) -> dict:
    return textio.export(store, H100.name)


def test_cast_entries_export_and_import_with_their_problem(tmp_path, rng):
    with Store.open(tmp_path / "a.db") as a:
        cfg = _variant(rng)
        problem = cast_kind.problem(cfg.params.pair, True)
        a.record(None, H100, "bfloat16", 2, (1, 8192, 8192), CLS, cfg, _ok(rng), problem=problem)
        a.record(None, H100, "bfloat16", 2, (1, 8192, 8192), CLS, valid_config(2, 8), _ok(rng))
        doc = _file(a)
    assert [e.get("problem") for e in doc["entries"]] == [None, problem]
    with Store.open(tmp_path / "b.db") as b:
        assert textio.import_into(b, json.loads(textio.dumps(doc))) == 2
        assert b.best(H100.name, 2, CLS, problem).config == cfg


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda e: e.pop("problem"), "stored as a transpose"),
        (lambda e: e.update(problem="cast:f32_e4m3"), "is the cast f32_e4m3"),
        (lambda e: e.update(problem="cast:bf16_int4"), "neither ''"),
        (lambda e: e["config"].update(tile_m=48), "tile_m"),
    ],
)
def test_untrusted_cast_entries_are_refused_with_the_entry_named(tmp_path, rng, change, message):
    with Store.open(tmp_path / "a.db") as a:
        cfg = _variant(rng)
        problem = cast_kind.problem(cfg.params.pair)
        a.record(None, H100, "bfloat16", 2, (1, 8192, 8192), CLS, cfg, _ok(rng), problem=problem)
        doc = _file(a)
    change(doc["entries"][0])
    with pytest.raises(StoreError, match=f"entry 0: .*{message}"):
        textio.parse(doc, "cast.json")


# --- migration --------------------------------------------------------------------------------
def test_revision_0006_keeps_every_row_and_keys_casts_apart(db_url, rng):
    """A database of revision 0005 with a transpose's result: upgraded, the row is a
    transpose's ("" problem), readable before the upgrade as such, and a cast result of the
    same class takes a best of its own beside it; going back to 0005 keeps the transposes'."""
    assert upgrade(db_url, revision="0005") == "0005"
    plain, m = valid_config(2, 8), _ok(rng)
    engine = sa.create_engine(resolve_url(db_url))
    try:
        with engine.begin() as conn:
            command.upgrade(migrations.alembic_config(conn), "0005")
        # rows as revision 0005 wrote them: the 0005 models are those less `problem`
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO at_devices (name, cc_major, cc_minor, multiprocessors,"
                    " memory_clock_khz, bus_width_bits, l2_bytes, driver_version, cuda_version,"
                    " max_threads_per_block, max_shared_per_block, updated_at) VALUES"
                    " (:n, 9, 0, 132, 2619000, 5120, 52428800, 12040, 12040, 1024, 49152, :t)"
                ),
                {"n": H100.name, "t": "2025-01-01T00:00:00+00:00"},
            )
            conn.execute(
                sa.text("INSERT INTO at_configs (key, elem_bytes, config_json) VALUES (:k, 2, :j)"),
                {"k": plain.key, "j": json.dumps(plain.to_dict())},
            )
            from autotranspose.store import hooks

            conn.execute(
                sa.text(
                    "INSERT INTO at_measurements (device_id, config_id, dtype, elem_bytes, batch,"
                    " m, n, shape_class, status, gbps, copy_gbps, time_us, template_version,"
                    " created_at, source, layout) VALUES (1, 1, 'bfloat16', 2, 1, 8192, 8192,"
                    " :c, 'ok', :g, :cg, 10.0, :tv, :t, 'tuned', '')"
                ),
                {"c": str(CLS), "g": m.gbps, "cg": m.copy_gbps, "tv": hooks.kernel_version(plain),
                 "t": "2025-01-01T00:00:00+00:00"},
            )  # fmt: skip
            conn.execute(
                sa.text(
                    "INSERT INTO at_best (device_id, elem_bytes, shape_class, config_id,"
                    " measurement_id, gbps, copy_gbps, ratio, template_version, updated_at,"
                    " source) VALUES (1, 2, :c, 1, 1, :g, :cg, :r, :tv, :t, 'tuned')"
                ),
                {"c": str(CLS), "g": m.gbps, "cg": m.copy_gbps, "r": m.ratio,
                 "tv": hooks.kernel_version(plain), "t": "2025-01-01T00:00:00+00:00"},
            )  # fmt: skip
    finally:
        engine.dispose()
    with Store.open(db_url, readonly=True) as old:  # read as it is, not migrated
        assert old.schema_revision() == "0005"
        (e,) = old.entries()
        assert e.problem == "" and e.config == plain
        assert old.entries(problem=cast_kind.problem("bf16_e4m3")) == []
    cfg = _variant(rng)
    with Store.open(db_url) as store:
        assert store.schema_revision() == migrations.head() == "0006"
        (e,) = store.entries()
        assert e.problem == "" and e.config == plain and e.gbps == pytest.approx(m.gbps)
        assert store.measured(H100.name, 2, (1, 8192, 8192), plain).gbps == pytest.approx(m.gbps)
        store.record(
            None, H100, "bfloat16", 2, (1, 8192, 8192), CLS, cfg, _ok(rng),
            problem=cast_kind.problem(cfg.params.pair),
        )  # fmt: skip
        assert len(store.entries()) == 2
    engine = sa.create_engine(resolve_url(db_url))
    try:
        with engine.begin() as conn:
            command.downgrade(migrations.alembic_config(conn), "0005")
    finally:
        engine.dispose()
    with Store.open(db_url, readonly=True) as old:
        (e,) = old.entries()
        assert e.config == plain


# --- lookup -----------------------------------------------------------------------------------
def test_lookup_serves_a_stored_cast_config_for_its_pair_and_class(store, rng):
    cfg = _variant(rng)
    problem = cast_kind.problem(cfg.params.pair)
    lookup.clear_cache()
    before = lookup.cast_choice(H100, cfg.params.pair, CLS, store=store)
    assert before.source == "default"
    assert before.config == cast_kind.default(KernelConfig, BF16, E4M3)
    store.record(None, H100, "bfloat16", 2, (1, 8192, 8192), CLS, cfg, _ok(rng), problem=problem)
    exact = lookup.cast_choice(H100, cfg.params.pair, CLS, store=store)
    assert (exact.config, exact.source, exact.shape_class) == (cfg, "tuned", CLS)
    # another class: the default (no nearest class for cast-transposes)
    other = ShapeClass(1, 4096, 16384, 1)
    assert lookup.cast_choice(H100, cfg.params.pair, other, store=store).source == "default"
    # calls that also write the same-order output are served their own results only
    assert (
        lookup.cast_choice(H100, cfg.params.pair, CLS, both=True, store=store).source == "default"
    )
    # another pair, and a transpose of the same size and class, never see it
    assert lookup.cast_choice(H100, "bf16_e5m2", CLS, store=store).source == "default"
    assert lookup.choose(H100, 2, CLS, store=store).config.kind != "cast"


def test_the_cast_class_is_the_launchs_batch_sides_and_input_vector(rng):
    m, n = int(rng.integers(2, 5000)), int(rng.integers(2, 5000))
    plan = plan_cast((m, n), (1, 0), (n, 1), (m, 1), None)
    cls = cast_class(plan, BF16, 0)
    want_vec = 8 if m % 8 == 0 and n % 8 == 0 else cls.vec
    assert (cls.batch, cls.vec) == (1, want_vec)
    assert cls.m >= m > cls.m // 2 and cls.n >= n > cls.n // 2
    aligned = cast_class(plan_cast((4096, 4096), (1, 0), (4096, 1), (4096, 1), None), BF16, 0)
    assert aligned == ShapeClass(1, 4096, 4096, 8)
    assert cast_class(plan_cast((4096, 4096), (1, 0), (4096, 1), (4096, 1), None), BF16, 2).vec == 1


# --- tuner ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, pair",
    [
        ("bfloat16:float8_e4m3fn", (BF16, E4M3)),
        ("f32:e4m3", (F32, E4M3)),
        ("float16:float32", None),
    ],
)
def test_cast_pairs_parse_from_the_command_line(text, pair):
    if pair is None:
        with pytest.raises(TuningError, match="is not a cast pair"):
            parse_pair(text)
    else:
        assert parse_pair(text) == pair
    with pytest.raises(TuningError, match="IN:OUT"):
        parse_pair("bfloat16")


@pytest.mark.parametrize("code", sorted(cast_kind.PAIRS))
def test_a_cast_study_searches_its_pairs_variants_and_defaults(code):
    src, dst = cast_kind.PAIRS[code]
    target = cast_target(src, dst, (4096, 8192), both=True)
    space = cast_space(H100, target)
    assert all(c.params.pair == code for c in space.configs)
    assert cast_kind.default(KernelConfig, src, dst) in space
    assert target.problem == cast_kind.problem(code, True)
    name = cast_study_name(H100, target, space)
    assert target.problem in name and str(target.shape_class) in name


class _CastObjective:
    """Deterministic GB/s from a cast config: taller tiles and more words a thread are faster."""

    def __init__(self) -> None:
        self.measured: list[KernelConfig] = []

    def __call__(self, configs):
        self.measured += configs
        return [
            Measurement("ok", 1000.0 + c.tile_m + 10 * c.per_thread, 3000.0, 10.0) for c in configs
        ]


def test_a_cast_study_stores_its_best_under_the_pairs_problem(db, quiet_optuna):
    objective = _CastObjective()
    result = tune_cast(
        BF16, E4M3, (2048, 4096), objective=objective, store=db, device=H100,
        settings=TuneSettings(trials=6, seed=3, batch=3),
    )  # fmt: skip
    assert objective.measured[0] == cast_kind.default(KernelConfig, BF16, E4M3)
    assert len(objective.measured) == 6 and result.config in objective.measured
    problem = cast_kind.problem("bf16_e4m3")
    best = db.best(H100.name, 2, result.shape_class, problem)
    assert best.config == result.config
    assert db.entries(problem="") == []
    lookup.clear_cache()
    assert lookup.cast_choice(H100, "bf16_e4m3", result.shape_class, store=db).config == (
        result.config
    )
    # resumed: nothing measured twice
    again = _CastObjective()
    tune_cast(
        BF16, E4M3, (2048, 4096), objective=again, store=db, device=H100,
        settings=TuneSettings(trials=6, seed=3, batch=3),
    )  # fmt: skip
    assert again.measured == []


@pytest.mark.gpu
def test_a_cast_study_runs_on_the_gpu(tmp_path, quiet_optuna):
    from autotranspose.tuner.study.cast import tune_cast_gpu

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = tune_cast_gpu(
            "bf16:e4m3", (1024, 3072), db=str(tmp_path / "t.db"),
            settings=TuneSettings(trials=4, seed=np.random.default_rng().integers(1000)),
        )  # fmt: skip
    assert result.measurement.ok and result.config.params.pair == "bf16_e4m3"
    with Store.open(tmp_path / "t.db") as store:
        assert store.best(store.devices()[0].name, 2, result.shape_class, "cast:bf16_e4m3")


# --- the command line -------------------------------------------------------------------------
def _cli(*argv: str) -> tuple[int, str, str]:
    import io

    from _synthetic import DEVICE

    from autotranspose import cli

    def factory(dtype, shape, device, conjugate, layout=None, cast=None):
        objective = _CastObjective()
        objective.device = DEVICE
        objective.cast = cast
        return objective

    out, err = io.StringIO(), io.StringIO()
    rc = cli.run(list(argv), make_objective=factory, stdout=out, stderr=err)
    return rc, out.getvalue(), err.getvalue()


def test_tune_cast_stores_each_pair_and_shape_under_its_problem(tmp_path, quiet_optuna):
    from _synthetic import DEVICE

    db = str(tmp_path / "t.db")
    rc, out, err = _cli(
        "tune", "--cast", "bf16:e4m3", "float32:float8_e5m2", "--both",
        "--shapes", "2048x4096", "--trials", "3", "--seed", "5", "--db", db,
    )  # fmt: skip
    assert rc == 0, err
    assert "bf16_e4m3+both" in out and "f32_e5m2+both" in out
    with Store.open(db) as store:
        problems = {e.problem for e in store.entries(DEVICE.name)}
    assert problems == {"cast:bf16_e4m3+both", "cast:f32_e5m2+both"}


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--cast", "bf16:int8"), "argument --cast"),
        (("--cast", "bf16:e4m3", "--conjugate"), "--conjugate is not for them"),
        (("--cast", "bf16:e4m3", "--dtypes", "float32"), "--dtypes is not for them"),
        (("--both",), "--both is for cast-transposes"),
    ],
)
def test_tune_cast_refuses_what_is_not_for_casts(tmp_path, extra, message):
    rc, _, err = _cli("tune", "--shapes", "1024x1024", "--db", str(tmp_path / "t.db"), *extra)
    assert rc != 0 and message in err


def test_show_names_each_casts_problem(tmp_path, rng):
    db = str(tmp_path / "t.db")
    cfg = _variant(rng)
    with Store.open(db) as store:
        for both in (False, True):
            problem = cast_kind.problem(cfg.params.pair, both)
            store.record(
                None, H100, "bfloat16", 2, (1, 8192, 8192), CLS, cfg, _ok(rng), problem=problem
            )
    rc, out, _ = _cli("show", "--db", db, "--device", H100.name, "--json")
    assert rc == 0
    rows = json.loads(out)
    assert sorted(r["problem"] for r in rows) == ["cast:bf16_e4m3", "cast:bf16_e4m3+both"]
    rc, out, _ = _cli("show", "--db", db, "--device", H100.name)
    assert "cast:bf16_e4m3+both" in out and "cast:bf16_e4m3 " in out


def test_a_cast_study_starts_from_the_default_and_its_problems_neighbours(db, rng):
    """Warm starts: the default, then the pair's results (same output set) of other classes,
    nearest first; never another pair's or another output set's."""
    from autotranspose.tuner.study.cast import cast_known_good

    target = cast_target(BF16, E4M3, (8192, 8192))
    space = cast_space(H100, target)
    default = cast_kind.default(KernelConfig, BF16, E4M3)
    configs = [c for c in space.configs if c != default]
    near, far, other_set = (configs[i] for i in rng.choice(len(configs), 3, replace=False))
    problem = target.problem
    db.record(
        None, H100, "bfloat16", 2, (1, 4096, 8192), ShapeClass(1, 4096, 8192, 8), near,
        _ok(rng), problem=problem,
    )  # fmt: skip
    db.record(
        None, H100, "bfloat16", 2, (1, 256, 256), ShapeClass(1, 256, 256, 8), far, _ok(rng),
        problem=problem,
    )  # fmt: skip
    db.record(
        None, H100, "bfloat16", 2, (1, 8192, 8192), target.shape_class, other_set, _ok(rng),
        problem=cast_kind.problem("bf16_e4m3", True),
    )  # fmt: skip
    lookup.clear_cache()
    assert cast_known_good(H100, target, space, db) == [default, near, far]
