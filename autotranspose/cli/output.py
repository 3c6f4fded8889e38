"""What the command line prints besides its results' own lines: errors and warnings as one
line ``autotranspose: error: ...``, plain-text tables, and the numbers in them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TextIO

PROG = "autotranspose"


class UsageError(Exception):
    """A bad command line; printed as one line like any other error."""


def one_line(exc: BaseException) -> str:
    """The message on one line, with control characters shown escaped: a name or path with
    terminal escapes in it is printed, never obeyed."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def warning_printer(err: TextIO) -> Callable[..., None]:
    """`warnings.showwarning` while a command runs: one line ``autotranspose: warning: ...``
    like an error, not Python's two (where it was raised, then that source line)."""

    def show(message: Any, category: type[Warning], *_: Any, **__: Any) -> None:
        text = one_line(message).removeprefix(f"{PROG}: ")
        if category not in (UserWarning, RuntimeWarning) and not category.__module__.startswith(
            PROG
        ):
            text = f"{category.__name__}: {text}"  # another library's: say which kind
        print(f"{PROG}: warning: {text}", file=err)

    return show


def shape_text(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table; numbers right-aligned."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [
        all(_is_number(r[i]) for r in cells[1:]) and len(cells) > 1 for i in range(len(headers))
    ]
    lines = []
    for j, r in enumerate(cells):
        parts = [
            c.rjust(w) if num and j else c.ljust(w)
            for c, w, num in zip(r, widths, numeric, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _is_number(s: str) -> bool:
    try:
        float(s.rstrip("%"))
    except ValueError:
        return s in ("", "-")
    return True


def pct_text(ratio: float | None) -> str:
    return "-" if not ratio else f"{100 * ratio:.1f}%"


def gbps_text(x: float | None) -> str:
    return "-" if not x else f"{x:.1f}"
