"""Cast-transpose kernels (cast="<in>_<out>", templates/cast/cast.cu.j2): a batched transpose
that converts each element on the way, from float32, bfloat16 or float16 to float8 (e4m3 or
e5m2), bfloat16 or float16, times a scale, saturating to the output's largest finite value,
and that folds max |x| into an amax on the device. The same pass can also write the cast in
the input's own order (`both`), or only that (a strided cast with no transpose).

A block takes a `tile_m` x `tile_n` tile of the input. Its threads load `vec`-element words
(16 bytes at `vec` = 16 / input bytes) at each row's own alignment, convert them in registers,
write the same-order output from there, and stage each converted word whole in shared memory
at its row's own offset; after a barrier they transpose 4x4-byte (2x2-half) blocks of it in
registers by byte permutes (each row realigned by a funnel shift) into transposed rows, and
after another store 16-byte words of the transposed output at each output row's own
alignment (funnel shifts of shared-memory words). Words that a tile's edge (or the call's)
cuts go byte by byte (16 lanes a row), so any shape, pitch and offset runs. A whole tile whose
rows of x all start on a word boundary runs the same phases in a function of its own with its
extent and the rows' offsets as constants (about half the instructions); with `realign`, so
does a whole tile past the matrix's first column whose rows start off a word boundary (its
extent constants, its rows' offsets run-time values, no edge tests: every element of the
words it loads lies in the matrix). `pad` is 0: the padding of the transposed rows is derived.

These kernels are not in the transpose search space (`searches` is empty): a cast call
serves `default` (or a config it is given) for its pair; `space` lists the variants worth
timing for a pair.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .base import (
    CACHE_HINTS,
    NEWEST,
    RASTERS,
    WARP,
    Config,
    Kind,
    New,
    fixed_field_errors,
)


@dataclass(frozen=True)
class Format:
    """A floating-point format a cast reads or writes."""

    name: str  # the dtype's name, as torch and ml_dtypes spell it
    code: str  # its short name in a cast pair and a kernel's name
    size: int  # bytes
    max: float  # largest finite value: what larger magnitudes saturate to
    fp8: str = ""  # cuda_fp8.h's interpretation (__NV_E4M3, __NV_E5M2), "" for others


FLOAT32 = Format("float32", "f32", 4, 3.4028234663852886e38)
BFLOAT16 = Format("bfloat16", "bf16", 2, 3.3895313892515355e38)
FLOAT16 = Format("float16", "f16", 2, 65504.0)
E4M3 = Format("float8_e4m3fn", "e4m3", 1, 448.0, "__NV_E4M3")
E5M2 = Format("float8_e5m2", "e5m2", 1, 57344.0, "__NV_E5M2")

INPUTS: tuple[Format, ...] = (FLOAT32, BFLOAT16, FLOAT16)
OUTPUTS: tuple[Format, ...] = (E4M3, E5M2, BFLOAT16, FLOAT16)
FORMATS = {f.name: f for f in (*INPUTS, *OUTPUTS)}
# every (input, output) pair; a pair's code ("bf16_e4m3") is a cast config's `cast` field
PAIRS: dict[str, tuple[Format, Format]] = {
    f"{i.code}_{o.code}": (i, o) for i in INPUTS for o in OUTPUTS
}

CAST_TILE_M: tuple[int, ...] = (32, 64, 128, 256)
CAST_TILE_N: tuple[int, ...] = (32, 64, 128)
CAST_MAX_THREADS = 1024
STORE_BYTES = 16  # the transposed output moves in 16-byte words (at each row's alignment)
_WORDS = {1: "unsigned char", 2: "unsigned short", 4: "u32", 8: "uint2", 16: "uint4"}


@dataclass(frozen=True)
class CastParams:
    """A cast-transpose kernel's own parameter: its pair, "<in>_<out>" (`PAIRS`)."""

    pair: str = ""


def pair_code(src: Format, dst: Format) -> str:
    return f"{src.code}_{dst.code}"


# How tuned results of cast-transposes are keyed beside the transposes' (whose problem is ""):
# the pair, and whether the same-order output is written too (`both` adds a third of the
# traffic, written from the same registers, so a tile's best trade of loads against stores
# can differ). amax is not in the key: it adds one warp reduction and one atomic a block.
PROBLEM_PREFIX = "cast:"
BOTH_SUFFIX = "+both"


def problem(code: str, both: bool = False) -> str:
    """The store's key of a pair's cast-transposes: "cast:bf16_e4m3", "cast:bf16_e4m3+both"."""
    if code not in PAIRS:
        raise ValueError(f"{code!r:.40} is not a cast pair; the pairs are {sorted(PAIRS)}")
    return f"{PROBLEM_PREFIX}{code}{BOTH_SUFFIX if both else ''}"


def parse_problem(text: object) -> tuple[str, bool] | None:
    """(pair code, both) of a stored problem, None for "" (a transpose); anything else (it is
    read from files and databases) is a ValueError naming the form."""
    if text == "":
        return None
    if isinstance(text, str) and text.startswith(PROBLEM_PREFIX) and len(text) <= 40:
        body = text[len(PROBLEM_PREFIX) :]
        both = body.endswith(BOTH_SUFFIX)
        code = body[: -len(BOTH_SUFFIX)] if both else body
        if code in PAIRS:
            return code, both
    raise ValueError(
        f"problem {text!r:.60} is neither '' (a transpose) nor a cast-transpose's "
        f"'cast:<in>_<out>' or 'cast:<in>_<out>+both' with a pair of {sorted(PAIRS)}"
    )


def pair_of(c: Config) -> tuple[Format, Format]:
    return PAIRS[c.params.pair]


def _threads(c: Config) -> int:
    """Each thread loads `per_thread` words of `vec` elements of a full tile."""
    return c.tile_m * c.tile_n // (c.vec * c.per_thread)


def _row_bytes(c: Config) -> int:
    """Bytes a staged row takes in shared memory: its `tile_n / vec` words and the one more a
    row off its word boundary reaches into, each converted (`vec` output elements)."""
    _, dst = PAIRS[c.params.pair]
    return (c.tile_n // c.vec + 1) * c.vec * dst.size


def _exchange_blocks(dst: Format) -> int:
    """Blocks side by side a thread of the exchange takes: two of 2x2 halves (a row's offset
    is computed once for 4 elements, as for the 4x4 bytes of float8)."""
    return 1 if dst.size == 1 else 2


def _out_words(c: Config) -> int:
    """4-byte words a transposed row takes in shared memory: 16 bytes before and after the
    tile's `tile_m` elements (a 16-byte word at the output row's alignment reaches that far),
    padded so that the exchange's warp (8 row groups x 4 column units, units 4 transposed rows
    apart) writes 32 distinct banks: 4 rows' pitch at 8 banks (an even pitch, for the aligned
    store's 8-byte reads)."""
    _, dst = PAIRS[c.params.pair]
    words = (c.tile_m * dst.size + 32) // 4
    assert (4 // dst.size) * _exchange_blocks(dst) == 4
    return words + (2 - words) % 8


def _errors(c: Config) -> Iterator[str]:
    if c.params.pair not in PAIRS:
        yield f"cast={c.params.pair!r} is not a cast pair; the pairs are {sorted(PAIRS)}"
        return
    src, dst = PAIRS[c.params.pair]
    yield from fixed_field_errors(
        c,
        "cast",
        {
            "layout": "pad",
            "conjugate": False,
            "pad": 0,
            "persistent": 0,
        },
        "a cast kernel takes one tile a block and its own padding",
    )
    if c.elem_bytes != src.size:
        yield (
            f"cast={c.params.pair!r} reads {src.size}-byte {src.name}: set elem_bytes={src.size} "
            f"(got {c.elem_bytes})"
        )
        return
    word = c.vec * src.size
    if word not in (4, 8, 16):
        yield (
            f"cast: vec={c.vec} loads {word}-byte words of {src.name}; a word is 4, 8 or 16 "
            f"bytes: use vec={16 // src.size} (16 bytes) or {8 // src.size}"
        )
        return
    if c.tile_m % (STORE_BYTES // dst.size):
        yield (
            f"cast: tile_m={c.tile_m} must be a multiple of the {STORE_BYTES // dst.size} "
            f"{dst.name} elements of a 16-byte store"
        )
    if c.tile_n % c.vec:
        yield f"cast: tile_n={c.tile_n} must be a multiple of vec={c.vec}"
        return
    threads = _threads(c)
    if c.tile_m * c.tile_n % (c.vec * c.per_thread) or threads % WARP or threads > 1024:
        yield (
            f"cast tile {c.tile_m}x{c.tile_n} with vec={c.vec} and per_thread={c.per_thread} "
            f"gives {c.tile_m * c.tile_n / (c.vec * c.per_thread):g} threads; a block takes a "
            f"multiple of {WARP} up to {CAST_MAX_THREADS}: change per_thread"
        )
    elif c.min_blocks * threads > 2048:
        yield (
            f"min_blocks={c.min_blocks} blocks of {threads} threads exceed the 2048 threads an "
            f"SM runs; use 0 or 2 to {2048 // threads}"
        )


def _smem(c: Config) -> int:
    """The staged rows (and 16 bytes a last row's funnel shift reads past them), the
    transposed rows, then one word per warp for the block's amax."""
    return c.tile_m * _row_bytes(c) + 16 + 4 * c.tile_n * _out_words(c) + 4 * (_threads(c) // WARP)


def _params(c: Config) -> dict[str, Any]:
    """What templates/cast/cast.cu.j2 needs about one cast config."""
    src, dst = PAIRS[c.params.pair]
    threads = _threads(c)
    ki, ko = c.vec, STORE_BYTES // dst.size
    kk = 4 // dst.size  # the exchange's blocks: kk x kk elements, a 4-byte word a row
    xq = _exchange_blocks(dst)
    nb = c.tile_n // (kk * xq)  # column units of a tile row
    units = c.tile_m // kk * nb
    words_m = c.tile_m // ko + 1  # a tile's output row spans at most this many 16-byte words
    row_bytes = _row_bytes(c)
    return {
        "src": src,
        "dst": dst,
        "tm": c.tile_m,
        "tn": c.tile_n,
        "ki": ki,
        "ko": ko,
        "kk": kk,
        "xq": xq,
        "nb": nb,
        "xu": -(-units // threads),  # exchange passes of the block
        "units": units,
        "pt": c.per_thread,
        "pad": c.pad,
        "g": c.tile_n // ki,  # input words a tile row spans (aligned)
        "sa_pitch": row_bytes,
        "sa_bytes": c.tile_m * row_bytes + 16,
        "sb_words": _out_words(c),
        "sb_bytes": 4 * c.tile_n * _out_words(c),
        "smem": _smem(c),
        "threads": threads,
        "warps": threads // WARP,
        "words_m": words_m,
        # store passes: whole words from each row's first 16-byte boundary
        "stores_a": -(-c.tile_n * (words_m - 1) // threads),
        "raster": c.raster,
        "min_blocks": c.min_blocks or 1,
        "extra": -(-c.tile_m // threads),  # passes over the rows' one word more
        # whole 16-byte words a tile row of z holds at most (from its first 16-byte boundary)
        "zwords": c.tile_n * dst.size // 16,
        "zstores": -(-c.tile_m * (c.tile_n * dst.size // 16) // threads),
        # passes of 16 lanes a row over the words a tile's edge cuts (cut_words)
        "ycut": -(-c.tile_n * 16 // threads),
        "zcut": -(-c.tile_m * 16 // threads),
        "in_word_bytes": ki * src.size,
        "in_t": _WORDS[ki * src.size],
        "n_in32": ki * src.size // 4,
        "out_word_bytes": ki * dst.size,
        "out_t": _WORDS[ki * dst.size],
        "n_out32": max(1, ki * dst.size // 4),
        "elem_t": _WORDS[dst.size],
        "log_ib": src.size.bit_length() - 1,
        "log_ob": dst.size.bit_length() - 1,
        "dynamic": c.dynamic_smem > 0,  # shared memory past the static limit: extern, opted in
        "realign": c.realign,  # interior tiles of rows off their word boundary: a function of their own
    }


class CastKind(Kind):
    name = "cast"
    Params = CastParams
    mark = "cast"
    template = "cast/cast.cu.j2"
    persistent = False
    capped = False
    # tiles past 48 KiB (256 input rows by 128 columns: wider pieces of odd output rows, fewer
    # 32-byte sectors shared between blocks) declare their shared memory dynamic
    dynamic_shared = True

    # written as `cast="<in>_<out>"` (its pair), the key's part `_x<in>_<out>`
    def flag_defaults(self) -> dict[str, Any]:
        return {"cast": ""}

    def written(self, params: Any) -> dict[str, Any]:
        return {"cast": params.pair}

    def reads(self, flags: Mapping[str, Any]) -> Any | None:
        pair = flags.get("cast")
        if not isinstance(pair, str) or not pair or set(flags) != {"cast"}:
            return None
        return CastParams(pair)

    def key_part(self, params: Any) -> str:
        return f"_x{params.pair}"

    def spelled(self) -> str:
        return "cast='<in>_<out>' (a cast pair) alone"

    def errors(self, c: Config) -> Iterator[str]:
        return _errors(c)

    def any_offset(self, c: Config) -> bool:
        """Words are loaded and stored at each row's own alignment: any offset runs."""
        return True

    def derive(self, c: Config) -> dict[str, int]:
        return {"threads": _threads(c), "smem": _smem(c)}

    def params(self, c: Config) -> dict[str, object]:
        return _params(c)

    def tile_m_values(self, c: Config) -> tuple[int, ...]:
        return CAST_TILE_M

    def tile_n_values(self, c: Config) -> tuple[int, ...]:
        return CAST_TILE_N

    def grid(
        self, c: Config, m: int, n: int, batch: int, multiprocessors: int
    ) -> tuple[int, int, int]:
        tm, tn = self.tiles(c, m, n)
        return (tm * tn * batch, 1, 1)


KIND = CastKind()


def default(new: New, src: Format, dst: Format, aligned_out: bool = True) -> Any:
    """The config a pair runs untuned. 32-bit inputs: tiles of 128 input rows (a 16-byte store of float8
    covers 16 of them, so an output row's piece is a whole 128-byte line) by 64 columns,
    16-byte loads, 4 words a thread, registers capped for 1024 threads an SM (ptxas, nvcc 13:
    no spills on sm_80 and sm_90; uncapped, the three-phase kernels take 61-64 registers on
    sm_90). `aligned_out` (whether the transposed rows start on 16-byte boundaries) no longer
    changes the config: the kernel tests it once a block, and its shared-memory padding is
    derived (`pad` is 0). `realign` (whole tiles of rows off their word boundary in a function
    of their own) for 32-bit inputs: on an H200 (kernels only, L2-cold) float32 calls on such
    rows ran 1.04-1.13x, the others 0.994-1.002x; 16-bit inputs to float8 on such rows
    1.11-1.16x, but two of their calls on aligned rows with odd transposed rows 0.973 and
    0.982x, so 16-bit inputs race it instead (`race_candidates`; docs/perf-notes.md,
    "Cast-transposes: whole tiles of odd rows")."""
    vec = 16 // src.size
    if src.size == 2 and dst.size == 1:
        # 16-bit inputs to float8: 256-row tiles, 8 words a thread, registers capped for 3
        # blocks an SM (80; uncapped, 77-95 with z written from registers, sm_90, nvcc 13; 16-bit
        # outputs would need 72 KB of shared memory, past a static array's 48). On an H100
        # (CUDA graphs, L2-cold) bf16 -> float8 ran at 97-101% of copy this way against 80-84%
        # with the 128-row tiles
        tile_m, per_thread, min_blocks = 256, 8, 3
    else:
        tile_m, per_thread = 128, 4
        min_blocks = 1024 // (tile_m * 64 // (vec * per_thread))
    return new(
        src.size,
        tile_m,
        64,
        vec,
        per_thread,
        0,
        "pad",
        "row",
        "default",
        min_blocks=min_blocks,
        realign=src.size == 4,
        kind="cast",
        params=CastParams(pair_code(src, dst)),
    )


def space(new: New, src: Format, dst: Format) -> Iterator[Any]:
    """The variants worth timing for a pair: tiles, vector width, words a thread, padding,
    raster, cache hints and whether interior tiles of rows off their word boundary run a
    function of their own (`realign`), each a valid config of 64 to 1024 threads."""
    code = pair_code(src, dst)
    for tm in CAST_TILE_M:
        for tn in CAST_TILE_N:
            for vec in sorted({16 // src.size, 8 // src.size}, reverse=True):
                for pt in (1, 2, 4, 8, 16):
                    threads = tm * tn // (vec * pt)
                    if not 64 <= threads <= CAST_MAX_THREADS or tm * tn % (vec * pt):
                        continue
                    for pad in (0,):
                        for raster in RASTERS:
                            for cache in CACHE_HINTS:
                                for realign in (False, True):
                                    try:
                                        c = new(
                                            src.size, tm, tn, vec, pt, pad, "pad", raster,
                                            cache, realign=realign, kind="cast",
                                            params=CastParams(code),
                                        )  # fmt: skip
                                    except ValueError:  # ConfigError: not of this pair
                                        continue
                                    if c.fits(NEWEST):  # static shared memory: 48 KiB
                                        yield c


def race_candidates(new: New, src: Format, dst: Format, limits: Any = NEWEST) -> list[Any]:
    """What a cast's first call times after the default (which stays unless beaten): tiles of
    64, 128 and 256 input rows with 4 or 8 words a thread, the default's tile walked by
    columns of blocks (uncapped registers where the default caps them), the default with
    registers capped for one block more an SM where that leaves 64 or more (`capped`), and
    where `limits` lets a block opt in past 48 KiB, `wide_tiles`. The pair's tuned winners on
    the H100 came from these (docs/perf-notes.md: float32 -> float8 with `both` on odd shapes
    68.7 -> 76.4% of copy with 256-row tiles and 8 words a thread; bfloat16 -> float8
    aligned, 64-row tiles, +1-3 points). The variants take the default's `realign`; where
    that is off (16-bit inputs) the default with it on comes second."""
    first = default(new, src, dst)
    picks = [first] if first.realign else [first, first.replace(realign=True)]
    for c in space(new, src, dst):
        if c.tile_n != 64 or c.vec != 16 // src.size or c.cache != "default" or c in picks:
            continue
        if c.realign != first.realign:
            continue
        same = (c.tile_m, c.per_thread) == (first.tile_m, first.per_thread)
        rows = c.raster == "row" and c.tile_m in (64, 128, 256) and c.per_thread in (4, 8)
        if (rows and not same) or (c.raster == "col" and same):
            picks.append(c)
    picks += [c for c in capped(new, src, dst) if c not in picks]
    return picks + [c for c in wide_tiles(new, src, dst) if c.fits(limits) and c not in picks]


def capped(new: New, src: Format, dst: Format) -> list[Any]:
    """The default with registers capped for one block more an SM, where the cap stays at 64
    or more (no spills on sm_80 and sm_90, nvcc 13): 16-bit inputs to float8, 4 blocks of 256
    threads. On an H200 (L2-cold, % of copy) that ran bfloat16 -> e5m2 15143x5745 68.4 ->
    74.4 and bfloat16 -> e4m3 8016x18625 75.3 -> 81.3 (odd rows, memory latency exposed),
    aligned calls and `both` on odd shapes within 2 points (docs/perf-notes.md). Without
    `realign` whatever the default's: at 64 registers the call of the inner tiles' own
    function takes a stack frame on sm_80 (8 bytes, bfloat16 -> float8)."""
    first = default(new, src, dst)
    blocks = (first.min_blocks or 1) + 1
    if blocks * first.threads > 1024:  # under 64 registers a thread: spills
        return []
    return [first.replace(min_blocks=blocks, realign=False)]


def wide_tiles(new: New, src: Format, dst: Format) -> list[Any]:
    """Tiles past 48 KiB (dynamic shared memory): 256 input rows by 128 columns, so that a
    tile writes 128 columns of each same-order row and 256 of each transposed one (on odd
    rows, the 32-byte sectors two blocks share are what `both` loses to: a 64-column piece
    of a float8 row touches 3 sectors, 2 of them shared; docs/perf-notes.md), and for 16-bit
    outputs the 256-row tile that float8 outputs have within 48 KiB."""
    first = default(new, src, dst)
    out = []
    for tile_n, per_thread in ((128, 8), (128, 16), (64, 8)):
        try:
            c = first.replace(tile_m=256, tile_n=tile_n, per_thread=per_thread, min_blocks=0)
        except ValueError:  # ConfigError: not a block this pair's tile allows
            continue
        if c.dynamic_smem and c not in out:
            out.append(c)
    return out
