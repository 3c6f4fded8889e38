"""Child processes that need a change made before their command runs (a resource limit, a
signal's disposition, capabilities dropped), made without subprocess's `preexec_fn`: that runs
Python in a forked copy of the test process, which runs the fork hooks of what it imported
(JAX's warns that its threads, which the fork leaves behind, can deadlock the child). Here a
fresh Python makes the change and execs the command; limits, ignored or default signals and
the capability bounding set all survive exec."""

from __future__ import annotations

import sys
from collections.abc import Sequence

_PRELUDE = "import os, sys; exec(sys.argv[1]); os.execv(sys.argv[2], sys.argv[2:])"


def prepared(setup: str | None, argv: Sequence[str]) -> list[str]:
    """`argv` (its first item a path, such as sys.executable) run after the Python code
    `setup`; `argv` itself where there is nothing to set up."""
    if setup is None:
        return list(argv)
    return [sys.executable, "-c", _PRELUDE, setup, *argv]
