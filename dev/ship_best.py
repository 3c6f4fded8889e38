"""Developer tool: put the whole space's best configs that `dev/space_check.py` measured into
a shipped tuning file, where they beat its entry for the class by more than a margin.

    python dev/ship_best.py space_check.json [more.json ...] --file tuning_db/NVIDIA_H200.json

space_check times the whole space of a case and checks its finalists on fresh data (the
tuner's own measurement, `measure_one`), so its best is a tuned result the 40-trial tuner did
not reach. The file's entries and the new results go into a scratch SQLite database, where
`Store.record` keeps the faster of the two per class (the rule the tuner follows), and the
database is written back in the canonical format. The file is replaced only when an entry
changed.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from autotranspose.kernels.config import config_space
from autotranspose.kernels.shapes import max_vec, shape_class
from autotranspose.plans.dtypes import element_type
from autotranspose.store import Store, textio
from autotranspose.store.measurement import Measurement


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("reports", nargs="+", help="space_check.json files (serving or tuner mode)")
    ap.add_argument("--file", required=True, help="the shipped tuning file to update")
    ap.add_argument("--margin", type=float, default=0.01, help="least gain over the entry")
    args = ap.parse_args()
    shipped = textio.load(args.file)
    entries = {(e.elem_bytes, str(e.shape_class)): e for e in shipped.entries}
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{tmp}/merge.db")
        store.import_entries(shipped.device, shipped.entries, args.file)
        changed = 0
        for report in args.reports:
            for row in json.loads(Path(report).read_text()):
                et = element_type(row["dtype"])
                shape = tuple(row["shape"])
                cls = shape_class(*shape, max_vec(et.size, shape[1], shape[2]))
                best = row["best"]
                old = entries.get((et.size, str(cls)))
                if old is not None and best["ratio"] <= old.ratio * (1 + args.margin):
                    continue
                space = config_space(
                    et.name, shipped.device.limits, max_vector=cls.vec, short_side=min(cls.m, cls.n)
                )
                config = next((c for c in space if c.key == best["config"]), None)
                if config is None:  # a report from other code: its config is not a kernel here
                    raise SystemExit(
                        f"{report}: {best['config']} is not in the {et.name} {cls} "
                        "space of this code; re-run space_check on it"
                    )
                moved = 2 * shape[0] * shape[1] * shape[2] * et.size  # bytes read + written
                m = Measurement("ok", best["gbps"], row["copy_gbps"], moved / best["gbps"] / 1e3)
                if store.record(None, shipped.device, et.name, et.size, shape, cls, config, m):
                    changed += 1
                    was = f"{100 * old.ratio:.1f} {old.config.key}" if old else "none"
                    print(f"{et.name} {cls}: {was} -> {100 * best['ratio']:.1f} {config.key}")
        if changed:
            textio.dump(store, tmp, shipped.device.name)
            Path(tmp, f"{shipped.device.slug}.json").replace(args.file)
        store.close()
    print(f"{changed} entries changed")


if __name__ == "__main__":
    main()
