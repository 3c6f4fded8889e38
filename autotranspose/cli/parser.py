"""The command line's grammar: every command's options (`build_parser`), the argparse types
that bound them (positive counts, finite seconds, a sampler seed, --db, --devices, a GPU
model name), and the values read when a command runs (shapes, dtypes, axes), each refusal a
`UsageError` naming the option.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

from .._version import __version__
from ..errors import DeviceError, ShapeError, TuningError, UnsupportedDtypeError
from ..kernels.shapes import parse_shape
from ..plans.dtypes import element_type
from ..runtime.device import check_name
from .output import PROG, UsageError

_T = TypeVar("_T")


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # argparse reads `-3x4` and `-1,0` as options (only `-3` and `-.5` pass as negative
        # numbers), so `--shapes -3x4` ended in "expected at least one argument" and
        # `--axes -1,0` could not be written. No option of ours starts with a digit: read
        # every `-<digit>...` as a value, which the value's own check then judges by name.
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def error(self, message: str) -> NoReturn:  # argparse would print usage and exit 2
        raise UsageError(message)


# --- argument types ----------------------------------------------------------------------------
def split_items(values: Sequence[str]) -> list[str]:
    """Items given as `a,b c` (commas, spaces or both)."""
    return [item for v in values for item in v.split(",") if item.strip()]


def parse_option(option: str, parse: Callable[[str], _T], text: str) -> _T:
    """One value of `option`; a bad one is a usage error naming the option, as argparse's."""
    try:
        return parse(text)
    except (ShapeError, UnsupportedDtypeError) as exc:
        raise UsageError(f"argument {option}: {exc}") from None


def parse_shapes(values: Sequence[str], option: str = "--shapes") -> list[tuple[int, int, int]]:
    return [parse_option(option, parse_shape, v) for v in split_items(values)]


def parse_dtypes(values: Sequence[str], option: str = "--dtypes") -> list[str]:
    return [parse_option(option, element_type, v.strip()).name for v in split_items(values)]


def _device_name(text: str) -> str:
    """A GPU model name, by the rule the database and imported files follow."""
    try:
        return check_name(text)
    except DeviceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_axes(text: str) -> tuple[int, ...]:
    """`--axes 0,2,3,1` (commas or spaces; negative ones count from the end)."""
    items = [t for t in text.replace(",", " ").split() if t]
    try:
        return tuple(int(t) for t in items)
    except ValueError:
        raise UsageError(
            f"argument --axes: {text!r:.40} is not a list of axes; write a permutation like 0,2,3,1"
        ) from None


def check_no_dropped_values(args: argparse.Namespace) -> None:
    """argparse before Python 3.13 turns `--opt=--` into [] without calling the option's
    type, so the value would skip its check. No option of ours can hold an empty list
    (nargs="+" needs one item): an empty one is that."""
    for dest, value in vars(args).items():
        if isinstance(value, list) and not value:
            raise UsageError(f"argument --{dest.replace('_', '-')}: expected a value, not '--'")


# --- the parser -----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Generated, autotuned CUDA matrix-transpose kernels.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def db_option(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--db",
            metavar="URL",
            type=_db_location,
            help="tuning database: a SQLite file path or a SQLAlchemy URL (SQLite or "
            "PostgreSQL); default: $AUTOTRANSPOSE_DB, else a SQLite file in the "
            "user data directory",
        )

    t = sub.add_parser(
        "tune",
        help="tune kernels for shapes and dtypes on a local GPU",
        description="Tune kernels on a local GPU; an interrupted run resumes.",
    )
    t.add_argument(
        "--shapes",
        nargs="+",
        required=True,
        metavar="SHAPE",
        help="MxN or BATCHxMxN, e.g. 8192x8192 64x1024x1024 (commas work too); "
        "with --axes, 1 to 8 sides",
    )
    t.add_argument(
        "--axes",
        metavar="I,J,...",
        help="tune the permute of each of --shapes by these axes, e.g. --shapes "
        "64x256x56x56 --axes 0,2,3,1: its transpose pass, measured on the "
        "pass's own strides, into the pass's shape class (or the batched "
        "transpose a first call times against a packed or gather pass; a copy, "
        "packed or gather pass without one: nothing to tune)",
    )
    t.add_argument(
        "--dtypes",
        nargs="+",
        default=None,
        metavar="DTYPE",
        help="e.g. float32,int8 (default float32)",
    )
    t.add_argument(
        "--trials",
        type=_positive_int,
        default=40,
        help="finished trials per shape and dtype, counting earlier runs; with "
        "--devices, in total over the GPUs of one model (default 40)",
    )
    t.add_argument(
        "--timeout", type=_positive_float, metavar="SECONDS", help="stop each study after this long"
    )
    t.add_argument(
        "--patience",
        type=_positive_int,
        metavar="K",
        help="stop when K trials in a row did not beat the best",
    )
    t.add_argument("--sampler", choices=("tpe", "random", "gp"), default="tpe")
    t.add_argument(
        "--seed",
        type=_sampler_seed,
        help="seed of the sampler (0 to 2**32-1), for reproducible runs",
    )
    t.add_argument(
        "--batch",
        type=_positive_int,
        default=8,
        help="trials compiled and measured together (default 8)",
    )
    t.add_argument(
        "--device",
        type=_nonnegative_int,
        default=None,
        metavar="INDEX",
        help="local GPU index (default 0)",
    )
    t.add_argument(
        "--devices",
        type=_device_spec,
        metavar="all|I,J,...",
        help="tune on several local GPUs at once, one process each: all, or "
        "indices like 0,2; GPUs of one model share each study and its "
        "--trials, so the budget is spent once, not once per GPU",
    )
    t.add_argument("--conjugate", action="store_true", help="tune the conjugate transpose")
    t.add_argument(
        "--cast",
        nargs="+",
        metavar="IN:OUT",
        help="tune cast-transposes of these pairs instead of transposes, e.g. "
        "bfloat16:float8_e4m3fn f32:e5m2 (short names work): each of --shapes "
        "(contiguous input), with a device scale and amax, its results keyed by "
        "the pair and shape class (cast_transpose() uses them)",
    )
    t.add_argument(
        "--both",
        action="store_true",
        help="with --cast: tune the calls that also write the cast in the input's order",
    )
    t.add_argument(
        "--inplace",
        action="store_true",
        help="tune in-place transposes (transpose_()) instead of transposes: each of "
        "--dtypes and --shapes (a contiguous array), its passes' parameters (blocks, grid, "
        "rows ahead, bytes a lane; a square's tiles), the results keyed by the shape "
        "class, squares apart from rectangles (transpose_() uses them); one GPU",
    )
    db_option(t)

    s = sub.add_parser("show", help="tuned results per device")
    s.add_argument(
        "--device",
        type=_device_name,
        metavar="NAME",
        help="only this GPU model, e.g. 'NVIDIA H100 80GB HBM3'",
    )
    s.add_argument("--json", action="store_true", help="machine-readable output")
    db_option(s)

    lk = sub.add_parser("lookup", help="the kernel a call would use, and where it comes from")
    lk.add_argument(
        "--shape", required=True, help="MxN or BATCHxMxN, e.g. 4096x4096; with --axes, 1 to 8 sides"
    )
    lk.add_argument(
        "--axes",
        metavar="I,J,...",
        help="a permute of --shape by these axes (e.g. 0,2,3,1): show its plan and "
        "the kernel that serves it",
    )
    lk.add_argument("--dtype", default="float32")
    lk.add_argument(
        "--device", type=_device_name, metavar="NAME", help="GPU model name (default: local GPU 0)"
    )
    lk.add_argument("--conjugate", action="store_true")
    lk.add_argument("--source", action="store_true", help="print the kernel's CUDA source")
    lk.add_argument("--json", action="store_true", help="machine-readable output")
    db_option(lk)

    e = sub.add_parser("export", help="write tuned results as JSON")
    e.add_argument("--device", type=_device_name, metavar="NAME", help="only this GPU model")
    e.add_argument(
        "--all-devices",
        action="store_true",
        help="every GPU model in the database: one <model>.json each into -o DIR",
    )
    e.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="file to write (default stdout); with --all-devices, a directory",
    )
    db_option(e)

    i = sub.add_parser("import", help="read tuned results from JSON files")
    i.add_argument("paths", nargs="+", metavar="PATH")
    db_option(i)

    d = sub.add_parser("devices", help="list local GPUs (needs pycuda)")
    d.add_argument("--json", action="store_true")

    db = sub.add_parser("db", help="database maintenance")
    db_sub = db.add_subparsers(dest="db_command", metavar="ACTION", parser_class=_Parser)
    up = db_sub.add_parser("upgrade", help="migrate the database to this version's schema")
    db_option(up)

    b = sub.add_parser("bench", help="compare against copy, cuBLAS, CuPy, PyTorch and the seed")
    b.add_argument(
        "--shapes",
        nargs="+",
        default=["8192x8192"],
        metavar="SHAPE",
        help="e.g. 8192x8192 64x1024x1024 (default 8192x8192)",
    )
    b.add_argument(
        "--dtypes",
        nargs="+",
        default=None,
        metavar="DTYPE",
        help="e.g. float32,int8 (default float32); with --random, --random-permute "
        "or --small, the only types drawn (default: every type)",
    )
    b.add_argument(
        "--random",
        type=_positive_int,
        default=None,
        metavar="N",
        help="instead of --shapes: N random (shape, dtype) cases, 32 MB to "
        "1 GB, square, rectangular, skinny and batched, odd and aligned",
    )
    b.add_argument(
        "--random-permute",
        type=_positive_int,
        default=None,
        metavar="N",
        help="N random permutes: 3- to 6-D shapes, 32 MB to 1 GB, every element "
        "size, against copy, CuPy, PyTorch, cuTENSOR, torch.compile",
    )
    b.add_argument(
        "--small",
        type=_positive_int,
        default=None,
        metavar="N",
        help="N random small permutes and transposes (4 KB to 16 MB, 2- to 6-D, "
        "every dtype), each into out= and new: host-included us per call "
        "of ours against PyTorch's and CuPy's own on the same arrays",
    )
    b.add_argument(
        "--cast",
        type=_positive_int,
        default=None,
        metavar="N",
        help="N random cast-transposes (float32/bfloat16 to float8 e4m3/e5m2 or bfloat16, "
        "32 MB+, odd and aligned sides, with and without the same-order output) against "
        "copy, torch.compile and eager PyTorch (needs PyTorch)",
    )
    b.add_argument(
        "--inplace",
        type=_positive_int,
        default=None,
        metavar="N",
        help="N random in-place transposes (transpose_(): square, odd, prime, gcd > 1, "
        "skinny, batched; 1- to 16-byte elements; 8 MB+) against transpose() and copy, "
        "each pass timed (needs PyTorch)",
    )
    b.add_argument(
        "--inplace-peer",
        metavar="DIR",
        default=None,
        help="with --inplace: also check and time bryancatanzaro/inplace (Catanzaro, Keller "
        "and Garland's in-place transpose) from a checkout in DIR, built here with nvcc for "
        "this GPU (its float and double cases)",
    )
    b.add_argument(
        "--axes",
        metavar="I,J,...",
        help="permute each of --shapes (1 to 8 sides) by these axes, e.g. "
        "--shapes 64x256x56x56 --axes 0,2,3,1",
    )
    b.add_argument(
        "--seed",
        type=_nonnegative_int,
        default=0,
        metavar="S",
        help="the random cases' seed (default 0)",
    )
    b.add_argument("--json", metavar="PATH", help="write results as JSON")
    b.add_argument("--png", metavar="PATH", help="write a chart")
    b.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    b.add_argument(
        "--repeat",
        type=_positive_int,
        default=None,
        metavar="N",
        help="timed repeats, the median kept (default 7; --small: 5 runs of 300 calls)",
    )
    b.add_argument(
        "--warm",
        action="store_true",
        help="time every call on the same buffers, as a program repeats a call (L2-warm "
        "where input and output fit the L2; default: rotated buffers, L2-cold)",
    )
    b.add_argument(
        "--ceiling",
        action="store_true",
        help="also time each case's access pattern alone: kernels that read and write "
        "exactly the served launches' words, in their grid and tile order, with no exchange; "
        "prints ours / pattern / copy and the sectors read and written per byte",
    )
    b.add_argument("--device", type=_nonnegative_int, default=0, metavar="INDEX")
    db_option(b)
    return p


def _bounded(
    kind: type, least: float, inclusive: bool, most: int | None = None
) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` at least (or, not inclusive, above) `least`, and
    at most `most` if given."""
    noun = "an integer" if kind is int else "a number"
    words = "at least" if inclusive else "more than"

    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:  # also int()'s refusal of thousands of digits: echo only the start
            raise argparse.ArgumentTypeError(f"{text!r:.40} is not {noun}") from None
        if kind is float and not math.isfinite(v):  # float() takes inf, nan, 1e999
            raise argparse.ArgumentTypeError(
                f"{text!r:.40} is not a finite number; give one such as 60, or leave the option out"
            )
        shown = str(v)[:40]
        if not (v >= least if inclusive else v > least):
            raise argparse.ArgumentTypeError(f"{shown} must be {words} {least:g}")
        if most is not None and v > most:
            raise argparse.ArgumentTypeError(f"{shown} must be at most {most}")
        return v

    return parse


def _db_location(text: str) -> str:
    """An argparse type: `--db PATH|URL`, not blank (an empty path is the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r:.20} names no database (as a path it is the current directory); give a "
            "file (such as --db tuning.db) or a URL, or leave out --db to use $AUTOTRANSPOSE_DB "
            "or the default file"
        )
    return text


def _device_spec(text: str) -> Any:
    """An argparse type: `--devices all` or `--devices 0,2` (checked against the machine
    when the command runs)."""
    from ..tuner.multigpu import device_spec

    try:
        return device_spec(text)
    except TuningError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("devices ")) from None


_positive_int = _bounded(int, 1, inclusive=True)
_nonnegative_int = _bounded(int, 0, inclusive=True)
_positive_float = _bounded(float, 0, inclusive=False)
_sampler_seed = _bounded(int, 0, inclusive=True, most=2**32 - 1)  # what NumPy's seeding takes
