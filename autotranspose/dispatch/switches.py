"""The process-wide switches a user may flip: first-call measurement, keeping its winners in
the database, and the caches of prepared calls."""

from __future__ import annotations

from . import firstcall, picker as dispatch, winners


def set_first_call_measurement(on: bool | None) -> None:
    """Measure a few candidates on the first call of a class nobody tuned (on by default;
    None: back to ``AUTOTRANSPOSE_FIRST_CALL``). Off, first calls serve the looked-up guess."""
    firstcall.set_enabled(on)


def set_keep_winners(on: bool | None) -> None:
    """Keep first-call winners in the database for other processes (on by default; None:
    back to the environment variable), e.g. off for benchmarks of the first call."""
    winners.set_enabled(on)


def clear_caches() -> None:
    """Forget every prepared call of this process (transpose's and permute's), so the next
    call of each signature chooses again, reading the tuning database and shipped files anew
    (e.g. after another process imported or tuned results)."""
    dispatch.clear()
