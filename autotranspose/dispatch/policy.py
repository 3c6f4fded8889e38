"""What a call runs when no config is forced: one policy for every call type.

``lookup`` reads what was measured (the database, the shipped files, the nearest class);
this module decides everything else: the untuned default, how a looked-up config serves the
call, when it is only a guess that the first call measures, and what that measurement races.
The kinds keep their own defaults (`autotranspose/kinds/`); the policy chooses among them.

=================  ==============================  ======================  =====================
decision           transpose (and a permute's      permute pass            cast-transpose
                   transpose pass)
=================  ==============================  ======================  =====================
no result at all   `default_choice`: register      the plan's own pass     `cast_default`
                   transpose, narrow tile, tall,   (plans.permute)         (kinds.cast.default)
                   long rows, few rows, flat,
                   byte-permute/staged, tiled
which results      `own_class_only`: skinny,       -                       exactly the class
                   unaligned, few rows: exact                              (lookup.cast_choice)
                   class only; else the nearest
served as          `served`: `for_call` (the       its pass's kernel       lookup's config
                   call's side), the tiled default
                   where flat rows are strided
a guess to race    `raced`: `is_guess`,            `permute_race` not      `is_guess`
                   `overhangs`, `far_below`,       empty
                   `other_rows`
race list          `candidates` (`runs` filters)   own pass, then          `cast_race`
                                                   plan.alternatives
=================  ==============================  ======================  =====================

In-place transposes (transpose_()) run what `lookup.inplace_choice` serves their class
(`inplace_class`, under `inplace_problem`: squares apart): this device's tuned result of
exactly that class, else the shipped one, else `inplace_default` (the kind's parameters,
`kinds.inplace.default`); their passes as plans/inplace.py orders them and each COLS pass in
the widest words its rows divide (compiled per rule where 1- and 2-byte rows are whole 16-byte
words), or aligned 16- or 4-byte words where they are not whole 4-byte words, by the measured
rules `kernels.inplace.cols_line` and `cols_piece`. Nothing is raced:
a first call would time its candidates on the caller's own matrix.

A call of one contiguous run per matrix is a copy (`copies`). A permute's alternatives are
named by its planner (plans.permute, ALT_*: pure, planned before any device is known); the
policy races them. The race itself (timing, margins, refinement) is `firstcall`'s; the
winner is kept by `winners`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from ..kernels.config import (
    DIRECT_FEW_ROWS_MIN,
    DIRECT_SIZES,
    FEW_ROWS_MAX,
    FLAT_SHORT_SIDE,
    NEWEST,
    PRMT_SERVED,
    TILE_SIZES,
    DeviceLimits,
    KernelConfig,
    default_config,
    direct_default,
    few_cols_default,
    flat_default,
    narrow_configs,
    narrow_default,
    occupancy_steps,
    prmt_alternative,
    prmt_default,
    regt_alternative,
    regt_default,
    rows_at_any_offset,
    seed_config,
    staged_default,
    tall_default,
    tall_rows,
    wide_default,
    wide_rows,
    wider_tiles,
)
from ..kernels.shapes import ShapeClass, flat_fits, shape_class
from ..kinds import cast as cast_kind, inplace as inplace_kind
from ..kinds.cast import Format
from ..kinds.inplace import InplaceParams
from ..plans.cast import CastPlan
from ..plans.permute import Pass, Plan


@dataclass(frozen=True)
class Choice:
    """The config chosen for a call and where it came from (`shape_class`: the entry used)."""

    config: KernelConfig
    source: str
    shape_class: ShapeClass | None = None
    gbps: float | None = None
    ratio: float | None = None
    shape: tuple[int, int, int] | None = None  # (batch, m, n) it was measured on, where known


# --- transposes: the untuned default -------------------------------------------------------------
def copies(m: int, n: int, ld_in: int, ld_out: int) -> bool:
    """One column of contiguous elements in, or one row out to contiguous elements: each
    matrix is one contiguous run, a copy (H200: complex128 9832845x1 ran the tiled kernel at
    21% of copy). For calls with no config forced, no conjugate and no outer dims."""
    return (n == 1 and ld_in == 1) or (m == 1 and ld_out == 1)


def skinny_unaligned(elem_bytes: int, cls: ShapeClass) -> tuple[bool, bool]:
    """(skinny, unaligned): which classes are served only their own class's results."""
    # A skinny class is served its own tuned or shipped result, else the flat kernel: the
    # nearest other class's tiled kernel can be a tenth as fast there. Wide ones (few long
    # rows) only when their rows allow no vector of 8 bytes: with wide vectors the tiled
    # fallbacks beat the flat kernel's element-wise loads (H200, docs/perf-notes.md).
    skinny = cls.n <= FLAT_SHORT_SIDE or (cls.m <= FLAT_SHORT_SIDE and cls.vec * elem_bytes < 8)
    # Rows at odd offsets (or too unaligned for a 4-byte tiled word) are served their own
    # class's result, else the staged kernel: on the H200 it beat every other class's tiled
    # kernel there by 6-27 points (geometric means, docs/perf-notes.md).
    unaligned = not skinny and rows_at_any_offset(elem_bytes, cls.vec)
    return skinny, unaligned


def own_class_only(elem_bytes: int, cls: ShapeClass, conjugate: bool) -> bool:
    """Whether `cls` takes only results of exactly its class (else `default_choice`): skinny,
    unaligned and few-row classes, where another class's kernel wastes its tile."""
    skinny, unaligned = skinny_unaligned(elem_bytes, cls)
    return skinny or unaligned or class_few_rows(elem_bytes, cls, conjugate) is not None


def few_rows_default(
    elem_bytes: int, rows: int, cols: int, vec: int, conjugate: bool = False
) -> KernelConfig | None:
    """The config for few long rows: for 8- and 16-byte elements the direct kernel's
    (`direct_default`: every tile is an edge tile and costs no more; from DIRECT_FEW_ROWS_MIN
    rows, any alignment); for 4-byte elements in words of 8 bytes, tiles no taller than the
    rows (a taller tiled tile is all edge: element-wise loads and stores), 64 rows of
    2-element words, walking down the tile columns (H200: float32 140x1843254 89.1
    against 78.6); for 2-byte elements in 4-byte words, tiles of up to 128 rows of 2-element
    words, 8 a thread, capped at 64 registers. `rows` and `cols` are the call's
    (a class's fewest). None where the rule does not apply: no fewer rows than columns, rows
    of at least FEW_ROWS_MAX, fewer than DIRECT_FEW_ROWS_MIN (8 and 16 bytes), 16 (4 bytes)
    or 64 (2 bytes), 4-byte words of 4-byte elements, 2-byte elements in 2- or 8-byte words,
    1-byte elements."""
    if not rows < min(FEW_ROWS_MAX, cols):
        return None
    if elem_bytes in (8, 16):
        return (
            direct_default(elem_bytes, rows, cols, conjugate)
            if rows >= DIRECT_FEW_ROWS_MIN
            else None
        )
    if elem_bytes == 2 and vec == 2 and rows >= TILE_SIZES[2]:  # 32 rows spilled at 64 registers
        # 2-byte rows in 4-byte words (not 8: there the tiled default ran uint16 100x1000000
        # at 97.1): 128 rows at most, 8 elements a thread, 64 registers (H200: int16
        # 134x777624 79.0 against 61.6 served, bfloat16 190x600000 82.1 against 71.0 with
        # 128 rows and 4 blocks, float16 66x2000000 82.3 against 70.2 with 64 rows and 8
        # blocks: the whole space's best or next to it)
        tm = max(t for t in TILE_SIZES if t <= min(rows, 128))
        try:
            c = KernelConfig(2, tm, 64, 2, 8, 1, "pad", "col", conjugate=conjugate)
            # the space's cap of 64 registers: 4 blocks of 256 threads (128 rows), 8 of 128 (64)
            return c.replace(min_blocks=occupancy_steps(c.threads, (64,))[0])
        except ConfigError:
            return None
    v = min(vec, 2) if elem_bytes == 4 else 0
    if v * elem_bytes < 8 or rows < TILE_SIZES[0]:
        return None
    tm = max(t for t in TILE_SIZES if t <= min(rows, 64))
    try:
        return KernelConfig(elem_bytes, tm, 64, v, 4, 1, "pad", "col", conjugate=conjugate)
    except ConfigError:
        return None


# rows under this are raced a tiled tile that covers them (`few_rows_cover`): a 32-row tile.
# Taller (64 rows, 128 threads) spilled at the cap of 64 registers, and lost its race on
# float32 47x800000 (H200)
FEW_ROWS_COVER_MAX = 32


def few_rows_cover(
    elem_bytes: int, rows: int, cols: int, vec: int, conjugate: bool = False
) -> KernelConfig | None:
    """For few long rows of 4-byte elements in 8-byte words that the rule's tiles
    (`few_rows_default`, no taller than the rows) leave an edge of: one tiled tile of the
    smallest height that covers them (32 rows), 8 elements a thread, at the blocks that cap
    registers at 64. Every tile is an edge tile, but its columns move in 8-byte words all
    the same, and no row goes through a second, mostly idle tile (H200,
    int32 and float32 18x1033032: the whole space's best, 32x64 at 16 blocks, 96.2% of a
    copy, where the rule's 16-row tile ran 80.0 and the direct tile served 88.2). Raced on
    the first call, never served unmeasured. None where rows are a multiple of 16 (the
    rule's tiles have no edge), or not between 16 and FEW_ROWS_COVER_MAX (a 16-row tile of
    8 a thread is one warp, and spilled at its cap of 64 registers; so did a 64-row one)."""
    if elem_bytes != 4 or min(vec, 2) != 2 or not 16 < rows < min(FEW_ROWS_COVER_MAX, cols):
        return None
    if rows % TILE_SIZES[0] == 0:
        return None
    tm = min(t for t in TILE_SIZES if t >= rows)
    try:
        c = KernelConfig(4, tm, 64, 2, 8, 1, "pad", "col", conjugate=conjugate)
        return c.replace(min_blocks=occupancy_steps(c.threads, (64,))[0])
    except ConfigError:
        return None


def class_few_rows(elem_bytes: int, cls: ShapeClass, conjugate: bool) -> KernelConfig | None:
    """For few long rows, `few_rows_default` of the class's fewest rows and columns; None for
    other classes. Such a class is served its own results, else these: for 8- and 16-byte
    elements the direct kernel, whose edge tiles cost no more than full ones, so a class's
    rows need not fill its tiles (H200: float64 21x7536398 95 against 66.9,
    complex64 24x2000003 95.8 where the staged kernel had 91.9); for 4-byte rows in 8-byte
    words, tiled tiles no taller than the rows (H200: float32 140x1843254 89 against 79)."""
    return few_rows_default(elem_bytes, cls.m // 2 + 1, cls.n // 2 + 1, cls.vec, conjugate)


def default_choice(
    elem_bytes: int, cls: ShapeClass, limits: DeviceLimits = NEWEST, conjugate: bool = False
) -> Choice:
    """What a call of `cls` gets with no tuned or shipped result at all (the robust default
    the serving promise is measured against), the first of these that runs on `limits`."""
    return Choice(_default(elem_bytes, cls, limits, conjugate), "default")


def _default(
    elem_bytes: int, cls: ShapeClass, limits: DeviceLimits, conjugate: bool
) -> KernelConfig:
    def runs(c: KernelConfig | None) -> bool:
        return c is not None and c.fits(limits)

    m, n = cls.m, cls.n
    skinny, unaligned = skinny_unaligned(elem_bytes, cls)
    # 1. a side of 1- and 2-byte elements where the register transpose won (kinds/regt.py,
    # REGT_DEFAULT_SIDES; H100: int8 5x16000001 96 against 50, float16 8000001x5 101 against
    # 77), rendered here for the class's bound (`for_call` renders it for the call's side)
    regt = None if conjugate else regt_default(elem_bytes, m, n, exact=False)
    if runs(regt):
        return regt
    # 2. a side of 2-8 elements (any element size): the narrow direct tile, the whole space's
    # best on 8 of 8 such calls, 46-104% of copy against 23-81 for these defaults (H200)
    narrow = narrow_default(elem_bytes, m, n, conjugate)
    if runs(narrow):
        return narrow
    # 3. tall rows of 1-, 2- and 4-byte elements, skinny or unaligned: the tall byte-permute
    # kernel beat the flat one on 14 of 14 tall cases and the tiled byte-permute one on 5 of 5
    if (skinny or unaligned) and not conjugate and tall_rows(elem_bytes, m, n):
        tall = tall_default(elem_bytes, n)
        if runs(tall):
            return tall
    # 4. few long rows too unaligned for 8-byte vectors. 1 and 2 bytes: the wide byte-permute
    # kernel beat the flat and tiled ones by 8-24 points on 6 of 7 cases (H200), a class's
    # 1-byte rows on the run store. 4 bytes: the direct tile that spans the class's rows beat
    # the ordered wide kernel on 5 of 6 float32 cases of 9-64 rows by 2.5-29 points, lost one
    # by 2.4 (H200); a first call races both
    if not conjugate and cls.vec * elem_bytes < 8 and wide_rows(elem_bytes, m, n):
        if elem_bytes in DIRECT_SIZES:
            long_rows = direct_default(elem_bytes, m, n)
        else:
            long_rows = wide_default(elem_bytes, m, exact=False)
        if runs(long_rows):
            return long_rows
    # 5. few long rows (`class_few_rows`)
    rows = class_few_rows(elem_bytes, cls, conjugate)
    if runs(rows):
        return rows
    # 6. skinny: the flat kernel, its tile across the short side
    if skinny:
        flat = flat_default(elem_bytes, min(m, n), conjugate)
        if runs(flat):
            return flat
    # 7. unaligned: 1- and 2-byte rows the byte-permute kernel (it beat the staged one by
    # 4-16 points on 7 of 7 1-byte odd cases and by 1.6 on the geometric mean of 6 2-byte
    # ones), else the staged kernel
    if unaligned:
        prmt = prmt_default(elem_bytes, conjugate) if elem_bytes in PRMT_SERVED else None
        for kind in (prmt, staged_default(elem_bytes, conjugate)):
            if runs(kind):
                return kind
    # 8. the tiled default for the widest vector the class allows
    return default_config(elem_bytes, max_vector=cls.vec, conjugate=conjugate)


# --- transposes: a looked-up config as the call runs it, and when it is a guess ----------------
def for_call(c: KernelConfig, m: int, n: int) -> KernelConfig:
    """A served (not forced) config as an m x n call runs it (`Kind.for_call`): a register
    transpose rendered for the call's side, an ordered wide config of 1-byte rows that end
    mid-word as its run-store twin (`for_rows`), every other config as it is."""
    return c.policy.for_call(c, m, n)


def served(
    choice: Choice,
    elem_bytes: int,
    m: int,
    n: int,
    ld_in: int,
    ld_out: int,
    vec: int,
    conjugate: bool,
) -> KernelConfig:
    """The config a call with row pitches `ld_in`, `ld_out` runs for lookup's `choice`: as its
    side renders it, or the tiled default where a flat config cannot run the strided rows."""
    cfg = for_call(choice.config, m, n)
    if cfg.spans_short_side and not flat_fits(cfg, m, n, ld_in, ld_out):
        return default_config(elem_bytes, max_vector=vec, conjugate=conjugate)
    return cfg


# a shipped result that ran at less than this share of a copy where it was tuned is raced on
# a first call like a guess (the race keeps it unless a candidate beats it)
SHIPPED_RACED_BELOW = 0.8


def is_guess(choice: Choice, cls: ShapeClass) -> bool:
    """Was `choice` measured for another class than `cls`, or not measured at all? Then a
    first-call measurement (`firstcall`) may find better."""
    if choice.source in ("tuned", "measured"):
        return False
    return choice.source != "shipped" or choice.shape_class != cls


def far_below(choice: Choice) -> bool:
    """Whether a shipped result ran far below the copy ceiling when it was tuned. Kernels
    come after the results shipped for a GPU: the H200's uint8 3x40000003 was shipped a narrow
    direct tile at 48% of copy, tuned before the register transposes existed, and the staged
    one runs the same call at 102. A first call's race costs milliseconds once; a shipped
    result that is far from the ceiling is worth checking against what the code has now."""
    return (
        choice.source == "shipped"
        and choice.ratio is not None
        and 0 < choice.ratio < SHIPPED_RACED_BELOW
    )


def other_rows(shape: tuple[int, int, int] | None, m: int, n: int) -> bool:
    """Whether a result measured on `shape` serves an m x n call of few rows (fewer than
    FEW_ROWS_MAX, and than columns) with other rows than it was measured on. A class spans
    rows up to twice apart, and what serves few rows depends on the exact rows: kernels
    rendered for them (the register transposes), tiles that leave another edge. Measured on
    one row count and served to another it lost up to 12 points (H100: int8 50 rows served
    37 rows' staged register transpose at 80% of copy, where the ordered wide kernel runs 90;
    H200: bfloat16 190 rows served 134 rows' 64-row tile, 70.7 -> 65.3)."""
    return shape is not None and m < n and m < FEW_ROWS_MAX and shape[1] != m


def overhangs(cfg: KernelConfig, m: int, n: int) -> bool:
    """Whether a tiled or direct tile is taller than the call's rows or wider than its
    columns. A class spans sides up to twice apart, so a shipped result of the call's own
    class may have been tuned on a side its tile fits and the call's does not: then part of
    every block idles, and the first call races it like a guess (H100: complex128 21x977100
    was served the 32x1048576 class's 32-row tile at 86.6% of copy, the seed kernel ran
    97.1)."""
    return cfg.kind in ("tiled", "direct") and (cfg.tile_m > m or cfg.tile_n > n)


def raced(choice: Choice, cfg: KernelConfig, cls: ShapeClass, m: int, n: int) -> bool:
    """Whether an m x n call's first call races `cfg` (served for lookup's `choice`): a
    guess, a shipped tile that overhangs the call, a shipped result far below the ceiling, or
    a result measured on other few rows."""
    return (
        is_guess(choice, cls)
        or (choice.source == "shipped" and overhangs(cfg, m, n))
        or far_below(choice)
        or other_rows(choice.shape, m, n)
    )


# --- transposes: what the first call races ---------------------------------------------------------
MAX_CANDIDATES = 8


def runs(
    c: KernelConfig, limits: DeviceLimits, m: int, n: int, vec: int, ld_in: int, ld_out: int
) -> bool:
    """Whether `c` can run an m x n call of vectors up to `vec` and these row pitches."""
    return (
        c.fits(limits)
        and (c.vec <= vec or c.any_offset)
        and c.applies(m, n)
        and (not c.spans_short_side or flat_fits(c, m, n, ld_in, ld_out))
    )


def candidates(
    guess: KernelConfig,
    neighbours: Sequence[KernelConfig],
    elem_bytes: int,
    m: int,
    n: int,
    vec: int,
    conjugate: bool,
    runnable: Callable[[KernelConfig], bool],
) -> list[KernelConfig]:
    """The first call's portfolio (`firstcall.search` times it, then the winner's
    neighbours): the guess first, then the others in this order, each once, only configs
    `runnable` accepts, at most MAX_CANDIDATES."""
    kinds: list[KernelConfig | None] = [
        default_config(elem_bytes, max_vector=vec, conjugate=conjugate),
        staged_default(elem_bytes, conjugate),
        # rows at any offset (not 4-byte words): the byte-permute default and the shape that
        # won where it lost (H200, docs/perf-notes.md, "Byte permutes"); the staged kernel above won
        # 3 of 6 2-byte cases by 1-2 points
        *(
            (prmt_default(elem_bytes, conjugate), prmt_alternative(elem_bytes, conjugate))
            if rows_at_any_offset(elem_bytes, vec)
            else ()
        ),
        flat_default(elem_bytes, min(m, n), conjugate) if min(m, n) <= FLAT_SHORT_SIDE else None,
        tall_default(elem_bytes, n) if tall_rows(elem_bytes, m, n) and not conjugate else None,
        wide_default(elem_bytes, m) if m < n and not conjugate else None,
        seed_config(elem_bytes).replace(conjugate=conjugate),
    ]
    # few long rows: the rule's tiles, and the direct kernel for the call's shape, before
    # other classes' results (H200: the direct kernel beat what was served on
    # few rows and columns of 4- to 16-byte elements by up to 30 points, lost elsewhere by
    # up to 12: a race decides)
    rows = few_rows_default(elem_bytes, m, n, vec, conjugate)
    cover = few_rows_cover(elem_bytes, m, n, vec, conjugate)
    direct = direct_default(elem_bytes, m, n, conjugate)
    # few columns: the narrow tiled tile (H200: float32 2266934x4 85.5% of copy,
    # where the portfolio's best, a flat kernel, ran 52.9)
    cols = few_cols_default(elem_bytes, m, n, vec, conjugate)
    # a side of 2-8 elements: the narrow direct tile (H200: the whole space's best
    # on 8 of 8 such calls, float16 2x261136885 83.5% of copy where 22.0 was served)
    narrow = narrow_configs(elem_bytes, m, n, conjugate)
    # the short sides of 1- and 2-byte elements where the register transpose won: it, rendered
    # for the call's side (docs/perf-notes.md, "Register transposes")
    regt = regt_default(elem_bytes, m, n) if not conjugate else None
    regt_other = regt_alternative(regt)
    # byte-permute tiles past 48 KiB, where this GPU has the shared memory (`runnable`)
    wider = wider_tiles(elem_bytes, m, n) if rows_at_any_offset(elem_bytes, vec) else []
    picked: list[KernelConfig] = []
    for c in (
        guess,
        regt,
        regt_other,
        *narrow,
        rows,
        cover,
        direct,
        cols,
        *wider,
        *neighbours,
        *kinds,
    ):
        if c is None:
            continue
        c = c if c.conjugate == conjugate else c.replace(conjugate=conjugate)
        if c not in picked and runnable(c):
            picked.append(c)
    return picked[:MAX_CANDIDATES]


# --- permute passes ----------------------------------------------------------------------------------
def permute_race(plan: Plan) -> tuple[Pass, ...]:
    """The passes a permute's first call times against the plan's own pass (`passes[0]`, the
    guess, kept unless beaten): the alternatives the planner named (plans.permute's ALT_*
    rules: other passes that move the same bytes and won somewhere). Empty: nothing raced."""
    return plan.alternatives


# --- cast-transposes -------------------------------------------------------------------------------
def cast_default(src: Format, dst: Format, aligned_out: bool = True) -> KernelConfig:
    """What a cast pair runs with no result of its class (and what a launch that does not
    transpose always runs): the pair's default (`kinds.cast.default`)."""
    return cast_kind.default(KernelConfig, src, dst, aligned_out)


def cast_aligned_out(plan: CastPlan, dst: Format, y_ptr: int) -> bool:
    """Whether every transposing launch's output rows start on 16-byte boundaries (part of
    what a cast's choice is cached by)."""
    return all(
        not lc.transpose
        or ((y_ptr + lc.o0 * dst.size) | lc.ld_o * dst.size | lc.bs_o * dst.size) % 16 == 0
        for lc in plan.launches
    )


def cast_runs(c: KernelConfig, code: str, limits: DeviceLimits) -> bool:
    """Whether `c` can run a cast of the pair `code` on a device with `limits`."""
    return c.kind == "cast" and c.params.pair == code and c.fits(limits)


def cast_race(
    guess: KernelConfig, src: Format, dst: Format, limits: DeviceLimits
) -> list[KernelConfig]:
    """What a cast's first call times: lookup's guess first (it stays unless beaten), then
    the pair's race candidates (`kinds.cast.race_candidates`), each once, those that run."""
    code = cast_kind.pair_code(src, dst)
    configs = [guess, *cast_kind.race_candidates(KernelConfig, src, dst, limits)]
    return list(dict.fromkeys(c for c in configs if cast_runs(c, code, limits)))


# --- in-place transposes -----------------------------------------------------------------------------
def inplace_default(elem_bytes: int, square: bool = False) -> InplaceParams:
    """What transpose_() of `elem_bytes`-byte elements runs where nothing tuned or shipped
    serves its class (`lookup.inplace_choice`): the kind's default (`kinds.inplace.default`),
    a square's or a rectangle's."""
    return inplace_kind.default(elem_bytes, square)


def inplace_class(batch: int, m: int, n: int) -> ShapeClass:
    """The class an in-place transpose's results are keyed by: its (batch, m, n) bucketed,
    vector 1 (x is contiguous: its passes pick their own words)."""
    return shape_class(batch, m, n, 1)


def inplace_problem(m: int, n: int) -> str:
    """The problem its results are kept under (`kinds.inplace.problem`): squares apart."""
    return inplace_kind.problem(m == n)


def inplace_config(elem_bytes: int, params: InplaceParams) -> KernelConfig:
    """`params` as the config the store keeps (conjugation is the call's, not the config's)."""
    return inplace_kind.config(KernelConfig, elem_bytes, params)


def lines_apart(shape: tuple[int, int, int] | None, m: int, n: int, elem_bytes: int) -> bool:
    """Whether an in-place result measured on `shape` ran other kernels than an m x n call
    runs: one's rows whole 16-byte words on both sides, the other's not. A class spans sides
    up to twice apart, odd and even alike, and the passes of odd sides are other kernels
    (SWAP in lines, COLS in realigned words), whose best parameters differ (H200: the uint8
    8192x8192 square's 512 threads run odd squares 2-7 points under 256)."""
    if shape is None:
        return False

    def whole(a: int, b: int) -> bool:
        return (a * elem_bytes) % 16 == 0 and (b * elem_bytes) % 16 == 0

    return whole(shape[1], shape[2]) != whole(m, n)


def inplace_raced(choice: Choice, cls: ShapeClass, elem_bytes: int, m: int, n: int) -> bool:
    """Whether transpose_()'s first call of an m x n call of class `cls` races
    (`dispatch.inplace.choose`): a guess (nothing tuned, measured or shipped for its class),
    or a shipped or measured result of its class measured on rows apart from the call's
    (`lines_apart`). A result tuned in this database is served as it is."""
    if is_guess(choice, cls):
        return True
    return choice.source in ("shipped", "measured") and lines_apart(choice.shape, m, n, elem_bytes)


def inplace_race(guess: InplaceParams, elem_bytes: int, square: bool) -> list[KernelConfig]:
    """What an in-place first call times: lookup's guess first (it stays unless beaten),
    then the kind's candidates (`kinds.inplace.race_candidates`), as configs."""
    found = inplace_kind.race_candidates(elem_bytes, square, guess)
    return [inplace_config(elem_bytes, p) for p in found]
