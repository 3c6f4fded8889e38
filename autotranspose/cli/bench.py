"""`autotranspose bench`'s command line: which of --random, --random-permute and --small draws
the cases, the dtypes they may draw, the shapes and axes given, all checked before the bench
(`autotranspose.bench.command`) touches a GPU.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from ..errors import UnsupportedDtypeError
from ..kernels.shapes import parse_dims
from ..plans.layout import normalize_axes
from .output import UsageError, shape_text
from .parser import parse_axes, parse_dtypes, parse_option, parse_shapes, split_items

_DRAWS = ("random", "random_permute", "small")  # the options that draw bench's cases


def cmd_bench(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ..bench.cases import draw_dtypes
    from ..bench.command import run_from_args

    drawing = [f"--{k.replace('_', '-')}" for k in _DRAWS if getattr(args, k) is not None]
    if getattr(args, "warm", False) and (args.small is not None or args.cast is not None):
        other = "--small" if args.small is not None else "--cast"
        raise UsageError(
            f"--warm times transposes and permutes on the same buffers; {other} already "
            "repeats each call on the same buffers: leave out --warm"
        )
    if getattr(args, "ceiling", False) and args.small is not None:
        raise UsageError(
            "--ceiling times the access pattern of large calls; --small times the host's "
            "cost of small ones: leave out --ceiling"
        )
    if getattr(args, "inplace_peer", None) and getattr(args, "inplace", None) is None:
        raise UsageError(
            "--inplace-peer DIR times bryancatanzaro/inplace beside transpose_(): add "
            "--inplace N (the in-place cases it runs on)"
        )
    if getattr(args, "inplace", None) is not None:  # in-place transposes: cases of their own
        if drawing or args.axes is not None or args.png or getattr(args, "cast", None):
            raise UsageError(
                "--inplace N draws its own in-place transposes and writes --markdown and "
                "--json: leave out --random, --random-permute, --small, --cast, --axes and --png"
            )
        from ..bench.inplace import run_inplace

        return int(run_inplace(args) or 0)
    if getattr(args, "cast", None) is not None:  # cast-transposes: cases of their own
        if drawing or args.axes is not None or args.png:
            raise UsageError(
                "--cast N draws its own cast-transposes and writes --markdown and --json: "
                f"leave out {(drawing or ['--axes' if args.axes is not None else '--png'])[0]}"
            )
        from ..bench.cast import run_cast

        return int(run_cast(args) or 0)
    if len(drawing) > 1:
        raise UsageError(
            f"--random N (transposes), --random-permute N (permutes) and --small N (the host "
            f"cost of small calls) each draw the cases: give one, not both {' and '.join(drawing)}"
        )
    if not drawing:
        args.dtypes = parse_dtypes(args.dtypes if args.dtypes is not None else ["float32"])
    elif args.dtypes is not None:  # only these types are drawn; without --dtypes, every type
        try:
            args.dtypes = list(draw_dtypes([v.strip() for v in split_items(args.dtypes)]))
        except UnsupportedDtypeError as exc:
            raise UsageError(f"argument --dtypes: {exc}") from None
    if args.small is not None and args.png:
        raise UsageError("--png charts GB/s per shape; --small writes --json and --markdown")
    if args.axes is not None:
        if drawing:
            raise UsageError(
                f"--axes permutes the --shapes given: leave out {drawing[0]} "
                "(--random, --random-permute and --small draw their own cases)"
            )
        args.shapes = [parse_option("--shapes", parse_dims, v) for v in split_items(args.shapes)]
        args.axes = parse_axes(args.axes)
        for shape in args.shapes:  # every shape must take these axes, before any GPU work
            normalize_axes(args.axes, len(shape))
    else:
        args.shapes = [shape_text(s) for s in parse_shapes(args.shapes)]
    return int(run_from_args(args) or 0)
