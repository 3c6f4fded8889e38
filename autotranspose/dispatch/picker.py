"""The one place that picks the kernels a call runs, and keeps them.

`transpose.launch_for(x, out, ...)` takes a transpose call's views and returns its prepared
launch; `permute.plan_of` and `permute.steps_for` take a permute call's views and return the
steps its plan runs (each transpose pass through `launch_for`'s choice). Both choose once per
signature, from the tuning database and shipped results (`_lookup`), the defaults and races
`policy` decides, and for a class nobody tuned the first call's measurement (`_firstcall`,
winners kept by `_winners`), and keep the result in `caches`, which also owns their invalidation. `_api` and
`_permuter` validate calls and run what this returns; `_fastpath` keeps each validated call
for its next repetition.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from . import caches, firstcall, permute, transpose
from .transpose import NO_OUTER, Outer, batched_launch, choose_config, launch_for


def unmeasured() -> AbstractContextManager[None]:
    """Within the block, this thread's picks skip the first call's measurement (no buffers to
    time on): what is served is the looked-up guess, kept as not final."""
    return firstcall.held_off()


def clear() -> None:
    """Forget every prepared call and lookup's cached choices (the public `clear_caches`)."""
    caches.clear()


__all__ = [
    "NO_OUTER",
    "Outer",
    "batched_launch",
    "caches",
    "choose_config",
    "clear",
    "launch_for",
    "permute",
    "transpose",
    "unmeasured",
]
