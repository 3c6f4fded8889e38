"""dev/: every script the repository names exists, the shell scripts parse, and the GPU
machine's runner (dev/device.sh) offers exactly the recipes dev/README.md lists."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "dev" / "device.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _texts() -> dict[Path, str]:
    """The files that name dev/ scripts: code, tests, docs, the shipped results' README."""
    paths = [*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md"), ROOT / "tuning_db" / "README.md"]
    for folder in ("autotranspose", "tests", "dev"):
        paths += (ROOT / folder).rglob("*.py")
    paths += (ROOT / "dev").glob("*.sh")
    return {p: p.read_text() for p in paths if p.is_file()}


def _runner(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUT": str(out)}
    return subprocess.run(
        ["bash", str(RUNNER), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_every_dev_script_the_repository_names_exists() -> None:
    named = {
        (path.relative_to(ROOT), name)
        for path, text in _texts().items()
        for name in re.findall(r"\bdev/([A-Za-z0-9_]+\.(?:py|sh))\b", text)
    }
    missing = sorted(
        f"{path} names dev/{name}" for path, name in named if not (ROOT / "dev" / name).exists()
    )
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("script", sorted((ROOT / "dev").glob("*.sh")), ids=lambda p: p.name)
def test_shell_scripts_parse(script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_runner_offers_the_recipes_dev_readme_lists(tmp_path: Path) -> None:
    done = _runner("help", out=tmp_path)
    assert done.returncode == 0, done.stderr
    offered = set(done.stdout.split("\n")[0].split())
    readme = (ROOT / "dev" / "README.md").read_text()
    section = readme.split("## Recipes of `dev/device.sh`", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"(?m)^- `([a-z-]+)", section))
    assert offered == listed
    assert {"tests", "bench-random", "campaign", "cast-campaign", "profile", "ab"} <= offered


def test_an_unknown_recipe_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    done = _runner("no-such-recipe", out=tmp_path)
    assert done.returncode == 2
    assert "unknown recipe 'no-such-recipe'" in done.stderr and "bench-random" in done.stderr


def test_diag_keeps_what_comes_back_to_eight_files(tmp_path: Path) -> None:
    """$OUT brings back at most 8 files: the rest is packed into one archive, the log kept out."""
    commands = [f"echo line {i}" for i in range(10)]
    done = _runner("diag", *commands, out=tmp_path)
    assert done.returncode == 0, done.stderr
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert files == ["log.txt", "rest-diag.tar.gz"]
    log = (tmp_path / "log.txt").read_text()
    assert "diag 9 rc=0: echo line 9" in log and "line 9" in log
    listing = subprocess.run(
        ["tar", "-tzf", str(tmp_path / "rest-diag.tar.gz")], capture_output=True, text=True
    )
    assert sorted(listing.stdout.split()) == sorted(f"diag.{i}.txt" for i in range(10))


def test_a_campaign_merge_keeps_the_shipped_entries_the_export_lacks(tmp_path: Path) -> None:
    """An export leaves out the classes a kernel change made stale: merging it into the
    shipped file keeps those as they were (for dev/restamp.py), takes the export's others and
    leaves the transposes' entries byte for byte."""
    import json
    import random

    shipped = json.loads((ROOT / "tuning_db" / "NVIDIA_H200.json").read_text())
    ours = [i for i, e in enumerate(shipped["entries"]) if e.get("problem")]
    rng = random.Random()
    dropped, changed = rng.sample(ours, 2)
    exported = json.loads(json.dumps(shipped))
    exported["entries"][changed]["gbps"] *= 1.5
    exported["entries"][changed]["ratio"] *= 1.5
    del exported["entries"][dropped]
    (tmp_path / "shipped.json").write_text(json.dumps(shipped))
    (tmp_path / "export.json").write_text(json.dumps(exported))
    out = tmp_path / "out.json"
    files = ["--shipped", tmp_path / "shipped.json", "--export", tmp_path / "export.json"]
    done = subprocess.run(
        [sys.executable, ROOT / "dev" / "cast_campaign.py", "merge", *files, "--out", out],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "1 kept from the shipped file" in done.stdout
    merged = json.loads(out.read_text())["entries"]

    def key(e: dict) -> tuple:
        return e["elem_bytes"], e["shape_class"], e.get("problem", "")

    by_key = {key(e): e for e in merged}
    assert len(merged) == len(shipped["entries"])
    assert by_key[key(shipped["entries"][dropped])] == shipped["entries"][dropped]
    assert (
        by_key[key(shipped["entries"][changed])]
        == exported["entries"][changed - (changed > dropped)]
    )
    assert [e for e in merged if not e.get("problem")] == [
        e for e in shipped["entries"] if not e.get("problem")
    ]
