"""The command line: tune, show, lookup, export, import, devices, db upgrade, bench.

`show`, `lookup`, `export`, `import` and `db upgrade` need no GPU and no pycuda; `tune`,
`devices` and `bench` import the GPU code only when they run. Every error autotranspose raises
on purpose, and every bad argument, prints as one line ``autotranspose: error: ...`` and exits
non-zero.

The package, one module per idea: `parser` (the grammar and its bounded number types),
`output` (one-line errors and warnings, tables), `stores` (the database a command opens;
`db upgrade`), `tune`, `results` (show, lookup, export, import), `devices` and `bench` (its
command line; the bench itself is `autotranspose.bench`).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import IO, TextIO

from ..errors import AutotransposeError
from .bench import cmd_bench
from .devices import cmd_devices
from .output import PROG, UsageError, one_line, warning_printer
from .parser import build_parser, check_no_dropped_values
from .results import cmd_export, cmd_import, cmd_lookup, cmd_show
from .stores import cmd_db_upgrade
from .tune import ObjectiveFactory, cmd_tune, gpu_objective

__all__ = ["UsageError", "build_parser", "main", "run"]


_COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO, TextIO], int]] = {
    "show": cmd_show,
    "lookup": cmd_lookup,
    "export": cmd_export,
    "import": cmd_import,
    "devices": cmd_devices,
    "bench": cmd_bench,
}


def run(
    argv: Sequence[str] | None = None,
    *,
    make_objective: ObjectiveFactory | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
) -> int:
    """Run one command; `make_objective(dtype, shape, device_index, conjugate)` builds what
    `tune` measures with (the GPU worker unless given: tests pass a synthetic one), called
    with `layout=` too for a permute's strided pass (`tune --axes`), `cast=` for a
    cast-transpose (`tune --cast`) and `inplace=True` for an in-place one (`tune --inplace`)."""
    err = stderr or sys.stderr
    with warnings.catch_warnings():
        warnings.showwarning = warning_printer(err)
        return _run(argv, make_objective, stdout or sys.stdout, err)


def _run(
    argv: Sequence[str] | None,
    make_objective: ObjectiveFactory | None,
    out: TextIO,
    err: TextIO,
) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        check_no_dropped_values(args)
        if args.command is None:
            parser.print_help(out)
            return 2
        if args.command == "tune":
            return cmd_tune(args, out, err, make_objective or gpu_objective)
        if args.command == "db":
            if args.db_command != "upgrade":
                raise UsageError("db needs an action: autotranspose db upgrade [--db URL]")
            return cmd_db_upgrade(args, out, err)
        return _COMMANDS[args.command](args, out, err)
    except BrokenPipeError:  # `autotranspose show | head`: the reader has what it wanted
        raise
    except (AutotransposeError, UsageError, OSError) as exc:
        print(f"{PROG}: error: {one_line(exc)}", file=err)
        return 2 if isinstance(exc, UsageError) else 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted (run the same command again to resume)", file=err)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    """The `autotranspose` console script."""
    try:
        return run(argv)
    except BrokenPipeError:
        # Python's recipe: point stdout at devnull so the flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
