"""The in-place kind as a config: its written form, validation and version; its results kept
in the store under their own problems (squares apart), validated on the way out, and served
to transpose_() by lookup."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from store_data import H100 as _H100, valid_config

from autotranspose.dispatch import lookup, policy
from autotranspose.errors import ConfigError, StoreError
from autotranspose.kernels import codegen
from autotranspose.kernels.config import KernelConfig, config_space
from autotranspose.kinds import inplace as inplace_kind
from autotranspose.kinds.inplace import InplaceParams
from autotranspose.runtime.device import DeviceInfo
from autotranspose.store import BadRowWarning, Store, textio
from autotranspose.store.measurement import Measurement

pytest_plugins = ("store_fixtures",)
pytestmark = pytest.mark.usefixtures("isolated_home")

# a GPU model no shipped file is for: what lookup serves comes from the test's store alone
GPU = DeviceInfo.from_dict({**_H100.to_dict(), "name": "In-place Test GPU 80GB"})
SIZES = (1, 2, 4, 8, 16)
DTYPES = {1: "int8", 2: "float16", 4: "float32", 8: "float64", 16: "complex128"}


def _random_params(rng, elem_bytes: int) -> InplaceParams:
    """Random valid parameters for `elem_bytes`-byte elements."""
    while True:
        p = InplaceParams(
            int(rng.choice(inplace_kind.TILES)),
            int(rng.choice(inplace_kind.THREADS)),
            int(rng.choice(inplace_kind.UNROLLS)),
            int(rng.choice(inplace_kind.LANE_BYTES)),
            int(rng.choice(inplace_kind.BLOCKS_PER_SM)),
        )
        if p.fits(elem_bytes):
            return p


def _ok(rng) -> Measurement:
    copy = float(rng.uniform(2500, 3200))
    return Measurement("ok", float(rng.uniform(0.1, 0.95)) * copy, copy, 10.0)


def _record(store, rng, elem_bytes, shape, params, source="tuned"):
    batch, m, n = shape
    cfg = policy.inplace_config(elem_bytes, params)
    cls, problem = policy.inplace_class(batch, m, n), policy.inplace_problem(m, n)
    store.record(None, GPU, "uint8", elem_bytes, shape, cls, cfg, _ok(rng), source=source,
                 problem=problem)  # fmt: skip
    return cfg


# --- the config ---------------------------------------------------------------------------------
@pytest.mark.parametrize("elem_bytes", SIZES)
def test_a_config_writes_and_reads_back_its_parameters(rng, elem_bytes):
    params = _random_params(rng, elem_bytes)
    cfg = policy.inplace_config(elem_bytes, params)
    assert cfg.kind == "inplace" and cfg.params == params
    assert cfg.to_dict()["inplace"] == params.key
    assert KernelConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert cfg.kernel_name.isidentifier() and params.key.replace(".", "_") in cfg.key
    assert cfg.threads == params.threads
    assert cfg.smem_bytes == params.swap_smem(elem_bytes)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"inplace": "t48.th256.u4.lb16.b8"}, "tile must be one of"),
        ({"inplace": "t32.th256"}, "not an in-place parameter key"),
        ({"inplace": "t32.th256.u4.lb16.b8", "tile_m": 64}, "tile_m"),
        ({"inplace": "t32.th256.u4.lb16.b8", "pad": 2}, "pad=1"),
        ({"inplace": "t32.th256.u4.lb16.b8", "prmt": True}, "spell no kernel kind"),
        ({"inplace": "t32.th256.u4.lb16.b8", "conjugate": True}, "complex"),
    ],
)
def test_an_untrusted_written_form_is_refused_with_the_field_named(change, message):
    written = {**policy.inplace_config(4, inplace_kind.default(4)).to_dict(), **change}
    with pytest.raises(ConfigError, match=message):
        KernelConfig.from_dict(written)


def test_a_swap_tile_past_static_shared_memory_is_refused():
    with pytest.raises(ConfigError, match="static shared memory"):
        policy.inplace_config(16, InplaceParams(tile=64))


def test_codegen_renders_no_program_but_versions_every_kernel_it_may_run(rng):
    e = int(rng.choice(SIZES))
    a = policy.inplace_config(e, inplace_kind.default(e))
    with pytest.raises(TypeError, match="program of inplace kernels"):
        codegen.render(a)
    other = _random_params(rng, e)
    while other == a.params:
        other = _random_params(rng, e)
    b = policy.inplace_config(e, other)
    assert codegen.kernel_version(a) != codegen.kernel_version(b)
    assert codegen.kernel_version(a) == codegen.kernel_version(KernelConfig.from_dict(a.to_dict()))
    assert all(c.kind != "inplace" for c in config_space(DTYPES[e]))  # not a transpose's


@pytest.mark.parametrize("elem_bytes", SIZES)
@pytest.mark.parametrize("square", [False, True])
def test_the_space_holds_the_default_and_no_two_configs_run_the_same_kernels(elem_bytes, square):
    space = list(inplace_kind.space(KernelConfig, elem_bytes, square))
    d = inplace_kind.default(elem_bytes, square)
    assert policy.inplace_config(elem_bytes, d) in space
    assert len(set(space)) == len(space)
    if square:  # only SWAP's tile and block reach a square's one pass
        assert {(c.params.unroll, c.params.lane_bytes, c.params.blocks_per_sm) for c in space} == {
            (d.unroll, d.lane_bytes, d.blocks_per_sm)
        }
    else:  # SWAP's tile never runs on a rectangle
        assert {c.params.tile for c in space} == {d.tile}
        assert len(space) > 50


@pytest.mark.parametrize(
    "text, square", [("inplace", False), ("inplace:square", True), ("", None), ("cast:x", None)]
)
def test_problems_name_squares_apart(text, square):
    assert inplace_kind.parse_problem(text) is square
    if square is not None:
        assert inplace_kind.problem(square) == text and len(text) <= 40


# --- the store ----------------------------------------------------------------------------------
def test_square_rectangle_and_transpose_results_of_one_class_keep_their_own_bests(store, rng):
    e = 2
    sq = _record(store, rng, e, (1, 4096, 4096), _random_params(rng, e))
    rect = _record(store, rng, e, (1, 4096, 4095), _random_params(rng, e))
    cls = policy.inplace_class(1, 4096, 4096)
    assert cls == policy.inplace_class(1, 4096, 4095)
    plain = valid_config(e, 1)
    store.record(None, GPU, "float16", e, (1, 4096, 4096), cls, plain, _ok(rng))
    assert store.best(GPU.name, e, cls, "inplace:square").config == sq
    assert store.best(GPU.name, e, cls, "inplace").config == rect
    assert store.best(GPU.name, e, cls, "").config == plain


def test_an_inplace_config_under_another_problem_is_not_recorded(store, rng):
    cfg = policy.inplace_config(4, _random_params(rng, 4))
    cls = policy.inplace_class(1, 300, 500)
    with pytest.raises(StoreError, match="in-place"):
        store.record(None, GPU, "float32", 4, (1, 300, 500), cls, cfg, _ok(rng))
    with pytest.raises(StoreError, match="in-place"):
        store.record(
            None, GPU, "float32", 4, (1, 300, 500), cls, valid_config(4, 4), _ok(rng),
            problem="inplace",
        )  # fmt: skip


@pytest.fixture
def changed_piece(monkeypatch):
    """`change(piece)`: from then on, that piece's rendered kernels (and no other's) differ
    from today's by a comment, as after an edit of its template (None: none differ); kernel
    versions are recomputed."""
    from autotranspose.kernels import inplace as kernels

    render = kernels.render_inplace

    def change(piece: str | None) -> None:
        monkeypatch.setattr(
            kernels,
            "render_inplace",
            lambda k: render(k) + (f"// {piece} edited\n" if k.piece == piece else ""),
        )
        codegen.kernel_version.cache_clear()

    codegen.kernel_version.cache_clear()
    yield change
    codegen.kernel_version.cache_clear()


@pytest.mark.parametrize("piece", ["swap", "cols", "shuffle", "conj"])
def test_a_problems_version_changes_only_with_the_kernels_its_programs_run(
    rng, changed_piece, piece
):
    """A square's results are versioned by SWAP (and CONJ, a 1 x 1's), a rectangle's by the
    other pass kernels: an edit of COLS leaves the squares' results current."""
    e = int(rng.choice(SIZES))
    cfg = policy.inplace_config(e, inplace_kind.default(e))
    problems = (inplace_kind.SQUARE, inplace_kind.RECTANGLE, "")
    before = [codegen.kernel_version(cfg, p) for p in problems]
    assert len(set(before)) == 3
    changed_piece(piece)
    after = [codegen.kernel_version(cfg, p) for p in problems]
    moved = {p for p, b, a in zip(problems, before, after, strict=True) if a != b}
    square = {inplace_kind.SQUARE} if piece in ("swap", "conj") else set()
    rectangle = {inplace_kind.RECTANGLE} if piece != "swap" else set()
    assert moved == square | rectangle | {""}


@pytest.mark.parametrize("square", [False, True])
def test_a_result_stored_with_every_kernels_version_is_current_until_one_changes(
    store, rng, changed_piece, square
):
    """Results stored when a result's version hashed every in-place kernel (problem "")
    stay current, and served, while none of those kernels changes; a new result is stored
    with its problem's version, which an edit of the other problem's kernels leaves current."""
    e = int(rng.choice(SIZES))
    shape = (1, 3000, 3000 if square else 2000)
    problem = policy.inplace_problem(*shape[1:])
    old = _record(store, rng, e, shape, _random_params(rng, e))
    assert [x.template_version for x in store.entries()] == [codegen.kernel_version(old, problem)]
    with store.engine.begin() as conn:  # as a result stored before versions were per problem
        conn.execute(
            sa.text("UPDATE at_best SET template_version = :v"),
            {"v": codegen.kernel_version(old)},
        )
    (entry,) = store.entries()
    assert not entry.stale and entry.config == old
    lookup.clear_cache()
    assert lookup.inplace_choice(GPU, e, *shape, store=store).config == old
    changed_piece("cols" if square else "swap")  # the other problem's kernel
    (entry,) = store.entries()
    assert entry.stale, "the version it was stored with hashed the edited kernel too"
    params = _random_params(rng, e)
    new = _record(store, rng, e, shape, params)  # stored under its problem's version
    (entry,) = store.entries()
    assert entry.config == new and not entry.stale  # a current result beats a stale best
    changed_piece("shuffle" if square else None)  # the other problem's kernels again
    (entry,) = store.entries()
    assert not entry.stale
    lookup.clear_cache()
    assert lookup.inplace_choice(GPU, e, *shape, store=store).config == new
    changed_piece("swap" if square else "cols")  # its own problem's
    (entry,) = store.entries()
    assert entry.stale


def test_a_tampered_row_never_reaches_a_transpose(store, rng):
    """An in-place result whose row was changed to a transpose's problem is skipped, named,
    and the transposes' lookup serves its default."""
    cfg = _record(store, rng, 4, (1, 8192, 8000), _random_params(rng, 4))
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE at_best SET problem = ''"))
    with pytest.warns(BadRowWarning, match="in-place"):
        assert store.entries() == []
    lookup.clear_cache()
    with pytest.warns(BadRowWarning):
        cls = policy.inplace_class(1, 8192, 8000)
        assert lookup.choose(GPU, 4, cls, store=store).config != cfg


def test_inplace_results_export_and_import_with_their_problem(tmp_path, rng):
    with Store.open(tmp_path / "a.db") as a:
        sq = _record(a, rng, 8, (2, 1000, 1000), _random_params(rng, 8))
        rect = _record(a, rng, 8, (1, 999, 1000), _random_params(rng, 8))
        doc = textio.export(a, GPU.name)
    assert sorted(e.get("problem") for e in doc["entries"]) == ["inplace", "inplace:square"]
    with Store.open(tmp_path / "b.db") as b:
        assert textio.import_into(b, json.loads(textio.dumps(doc))) == 2
        assert (
            b.best(GPU.name, 8, policy.inplace_class(2, 1000, 1000), "inplace:square").config == sq
        )
        assert b.best(GPU.name, 8, policy.inplace_class(1, 999, 1000), "inplace").config == rect
    doc["entries"][0]["problem"] = ""
    with pytest.raises(StoreError, match=r"entry 0: .*in-place"):
        textio.parse(doc, "inplace.json")


def test_an_exported_result_of_every_kernels_version_imports_current(tmp_path, rng, changed_piece):
    """A file written when in-place versions hashed every kernel imports as current (and
    beats nothing current it should not) while those kernels are today's; stale once one
    of them changed."""
    with Store.open(tmp_path / "a.db") as a:
        cfg = _record(a, rng, 2, (1, 999, 1000), _random_params(rng, 2))
        doc = textio.export(a, GPU.name)
    doc["entries"][0]["template_version"] = codegen.kernel_version(cfg)
    cls = policy.inplace_class(1, 999, 1000)
    assert not textio.parse(json.loads(textio.dumps(doc)), "old.json").entries[0].stale
    with Store.open(tmp_path / "b.db") as b:
        assert textio.import_into(b, json.loads(textio.dumps(doc))) == 1
        assert b.best(GPU.name, 2, cls, "inplace").config == cfg
        assert not b.entries()[0].stale
    changed_piece("swap")
    assert textio.parse(json.loads(textio.dumps(doc)), "old.json").entries[0].stale


# --- lookup -------------------------------------------------------------------------------------
def test_lookup_serves_the_exact_class_and_problem_else_the_default(store, rng):
    lookup.clear_cache()
    e = int(rng.choice(SIZES))
    m = int(rng.integers(300, 5000))
    n = m + int(rng.integers(1, 7))
    default = lookup.inplace_choice(GPU, e, 1, m, n, store=store)
    assert default.source == "default" and default.config.params == inplace_kind.default(e)
    params = _random_params(rng, e)
    while params == default.config.params:
        params = _random_params(rng, e)
    _record(store, rng, e, (1, m, n), params)
    lookup.clear_cache()
    got = lookup.inplace_choice(GPU, e, 1, m, n, store=store)
    assert got.source == "tuned" and got.config.params == params
    # the square of the same class, another element size, another class: not this result
    assert lookup.inplace_choice(GPU, e, 1, n, n, store=store).source == "default"
    other = 1 if e != 1 else 2
    assert lookup.inplace_choice(GPU, other, 1, m, n, store=store).source == "default"
    assert lookup.inplace_choice(GPU, e, 1, 4 * m, n, store=store).source == "default"


@pytest.mark.parametrize("elem_bytes", SIZES)
def test_an_untuned_square_gets_the_square_default_and_a_rectangle_the_other(store, elem_bytes):
    """SWAP alone runs a square: 1-byte squares take whole-line tiles of 128 in blocks of
    512, which the rectangles' passes (whose blocks `threads` also sets) never get."""
    lookup.clear_cache()
    sq = lookup.inplace_choice(GPU, elem_bytes, 2, 3000, 3000, store=store)
    rect = lookup.inplace_choice(GPU, elem_bytes, 2, 3000, 3001, store=store)
    assert sq.source == rect.source == "default"
    assert sq.config.params == inplace_kind.default(elem_bytes, square=True)
    assert rect.config.params == inplace_kind.default(elem_bytes)
    if elem_bytes == 1:
        assert (sq.config.params.tile, sq.config.params.threads) == (128, 512)
        assert rect.config.params.tile == 64 and rect.config.params.threads == 256
    else:
        assert sq.config.params == rect.config.params


def test_a_first_calls_winner_drops_only_its_own_cached_inplace_choice(store, rng):
    """A first call's winner recorded in this process (`store.hooks`) drops the cached
    choices of its own class and problem, no other."""
    lookup.clear_cache()
    a = lookup.inplace_choice(GPU, 4, 1, 700, 900, store=store)
    b = lookup.inplace_choice(GPU, 4, 1, 7000, 9000, store=store)
    params = _random_params(rng, 4)
    _record(store, rng, 4, (1, 700, 900), params, source="measured")
    got = lookup.inplace_choice(GPU, 4, 1, 700, 900, store=store)
    assert a.source == "default" and got.source == "measured" and got.config.params == params
    assert lookup.inplace_choice(GPU, 4, 1, 7000, 9000, store=store) is b


@pytest.mark.parametrize("square", [False, True])
@pytest.mark.parametrize("elem_bytes", [1, 2, 4, 8, 16])
def test_a_first_calls_candidates_start_with_the_guess_each_once_and_fitting(elem_bytes, square):
    """transpose_()'s first call times the guess first (it stays unless beaten), then the
    kind's candidates: distinct, each SWAP tile fitting its element size, a rectangle's
    grids within 2048 threads an SM, a square's only its tile and block changed."""
    for guess in (
        inplace_kind.default(elem_bytes, square),
        inplace_kind.InplaceParams(tile=16, threads=128),
    ):
        found = inplace_kind.race_candidates(elem_bytes, square, guess)
        assert found[0] == guess and len(set(found)) == len(found) >= 3
        assert all(p.fits(elem_bytes) for p in found)
        for p in found[1:]:
            if square:
                assert (p.unroll, p.lane_bytes, p.blocks_per_sm) == (
                    guess.unroll,
                    guess.lane_bytes,
                    guess.blocks_per_sm,
                )
            else:
                assert p.tile == guess.tile and p.threads * p.blocks_per_sm <= 2048
