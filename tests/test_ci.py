"""CI runs the test command the README gives: one line in .ci/run, quoted in the README."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_gives_the_test_command_ci_runs() -> None:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    marker = next(
        i for i, line in enumerate(lines) if line.startswith("# The README's test command")
    )
    command = next(line for line in lines[marker:] if line and not line.startswith("#"))
    assert command.startswith("python3 -m pytest ")
    assert f"runs `{command}`" in " ".join((ROOT / "README.md").read_text().split())
