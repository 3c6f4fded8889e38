"""Developer tool: a first-call portfolio change measured as a user meets it, in one process.

    python dev/firstcall_ab.py --without few_cols_default \
        --cases float32:2266934x4,int32:2500000x6 --out $OUT
    python dev/firstcall_ab.py --without narrow_configs,lookup.narrow_default --cases ...

For each case, `bench_case` serves the call three times with the lookup cache cleared in
between (no database, so every time is a first call): without the candidate that the named
functions supply (each returns None; a bare name is `firstcall`'s, `lookup.f` replaces what
lookup's default reads), with it, and without it again. The two runs without it show how
much the race itself scatters. Results go to `<out>/ab.json`.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from autotranspose import _firstcall as firstcall, _lookup as lookup
from autotranspose._shapes import parse_shape
from autotranspose.bench.runners import bench_case


def _nothing(f: Any) -> Any:
    """A stand-in for candidate function `f` that supplies nothing: [] or None, as `f` would."""
    empty = [] if str(inspect.signature(f).return_annotation).startswith("list") else None
    return lambda *a, **k: empty


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--without",
        required=True,
        help="candidate functions, e.g. few_cols_default or narrow_default,lookup.narrow_default",
    )
    ap.add_argument("--cases", required=True, help="dtype:shape,...")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    os.environ["AUTOTRANSPOSE_DB"] = f"sqlite:///{tempfile.mkdtemp()}/none.db"  # never created
    modules = {"firstcall": firstcall, "lookup": lookup}
    patched = []
    for name in args.without.split(","):
        module, _, func = name.rpartition(".")
        patched.append((modules[module or "firstcall"], func))
    real = [getattr(mod, func) for mod, func in patched]
    rows = []
    for item in args.cases.split(","):
        dtype, _, text = item.partition(":")
        shape = parse_shape(text)
        for variant in ("old", "new", "old2"):
            lookup.clear_cache()
            for (mod, func), f in zip(patched, real, strict=True):
                setattr(mod, func, f if variant == "new" else _nothing(f))
            found = bench_case(shape, dtype, peers=("copy", "autotranspose"), repeats=args.repeat)
            r = next(x for x in found if x.peer == "autotranspose")
            rows.append(
                {
                    "dtype": dtype,
                    "shape": shape,
                    "variant": variant,
                    "ratio": r.of_copy,
                    "note": r.note,
                }
            )
            print(
                f"{dtype:10} {'x'.join(map(str, shape)):>16} {variant:4} {100 * r.of_copy:5.1f} {r.note}",
                flush=True,
            )
    for (mod, func), f in zip(patched, real, strict=True):
        setattr(mod, func, f)
    Path(args.out, "ab.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
