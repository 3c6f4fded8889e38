"""Developer tool: restamp a shipped file's in-place results whose measured kernels a change
left byte for byte the same.

    python dev/restamp.py OLD_REV [--file tuning_db/NVIDIA_H200.json] [--problem inplace:square]
                                  [--write]

An in-place result's version hashes every kernel its problem's programs may run
(`kernels/inplace.py: program_source`), so a kernel added to a problem, or a comment changed in
one, makes every result of that problem stale although the kernels that ran on its own shape
did not change. For each in-place entry of the file (of `--problem` only, where given): its
version under OLD_REV's tree must be the stored one (else it was stale before the change, and
is left); the kernels its own shape's program runs on the file's GPU are rendered under both
trees; where they are the same text the entry takes this tree's version (`--write`), and where
they differ it is listed to be measured again (`bash dev/device.sh inplace-campaign`). Needs
git and the package's dependencies, no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run in a tree (PYTHONPATH): per in-place entry of the file, its version and the hash of the
# kernels its shape's program runs on the file's GPU
PROBE = r"""
import hashlib, json, sys
from autotranspose.kernels import codegen
from autotranspose.kernels.inplace import render_inplace
from autotranspose.runtime.compiler import DeviceState
from autotranspose.runtime.inplace import passes
from autotranspose.store import textio

path, problem = sys.argv[1], sys.argv[2]
tuning = textio.load(path)
state = DeviceState(0, 0, tuning.device)
rows = []
for i, e in enumerate(tuning.entries):
    if not e.problem.startswith("inplace") or (problem and e.problem != problem):
        continue
    batch, m, n = e.shape
    _, hows = passes(state, batch, m, n, e.elem_bytes, e.config.conjugate, e.config.params)
    served = hashlib.sha256("\n".join(render_inplace(h.spec) for h in hows).encode())
    version = codegen.kernel_version(e.config, e.problem)
    rows.append({"index": i, "version": version, "served": served.hexdigest()})
print(json.dumps(rows))
"""


def _probe(tree: Path, path: Path, problem: str) -> dict[int, dict]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), problem],
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=tree,  # `python -c` puts the working directory first on sys.path
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the probe failed in {tree}:\n{done.stderr}")
    return {row["index"]: row for row in json.loads(done.stdout)}


def _old_tree(rev: str, into: Path) -> Path:
    """OLD_REV's package and templates, unpacked under `into`."""
    archive = into / "old.tar"
    subprocess.run(
        ["git", "-C", str(ROOT), "archive", "-o", str(archive), rev, "autotranspose", "templates"],
        check=True,
    )
    with tarfile.open(archive) as tar:
        tar.extractall(into / "old", filter="data")
    return into / "old"


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from autotranspose.store import textio

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old_rev")
    p.add_argument("--file", type=Path, default=ROOT / "tuning_db" / "NVIDIA_H200.json")
    p.add_argument("--problem", default="", help="only this problem's entries")
    p.add_argument("--write", action="store_true", help="write the new versions into --file")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = _probe(_old_tree(args.old_rev, Path(tmp)), args.file, args.problem)
    new = _probe(ROOT, args.file, args.problem)
    doc = json.loads(args.file.read_text())
    changed = 0
    for i, now in new.items():
        entry, before = doc["entries"][i], old[i]
        what = f"entry {i} ({entry['problem']}, {entry['elem_bytes']} B, {entry['shape']})"
        if entry["template_version"] != before["version"]:
            print(f"{what}: stale before the change; left")
        elif now["served"] != before["served"]:
            print(f"{what}: its shape's kernels changed; measure it again")
        elif now["version"] != entry["template_version"]:
            print(f"{what}: {entry['template_version']} -> {now['version']}")
            entry["template_version"] = now["version"]
            changed += 1
    if args.write and changed:
        args.file.write_text(textio.dumps(doc))  # the shipped files' canonical text
    print(f"{changed} restamped{'' if args.write else ' (not written: --write)'}")


if __name__ == "__main__":
    main()
