"""On-by-default switches read from the environment (first-call measurement, keeping its
winners, the compiled launcher): one spelling of "off" for all of them."""

from __future__ import annotations

import os

OFF = ("0", "false", "no", "off")


def flag(name: str) -> bool:
    """False when the environment variable `name` says 0, false, no or off (any case)."""
    return os.environ.get(name, "1").strip().lower() not in OFF


class Switch:
    """An environment flag a process can override (`set(True/False)`), or hand back to the
    environment (`set(None)`); read on every `on()`, so a changed variable counts."""

    def __init__(self, env_var: str) -> None:
        self.env_var = env_var
        self._override: bool | None = None

    def set(self, on: bool | None) -> None:
        self._override = on

    def on(self) -> bool:
        return self._override if self._override is not None else flag(self.env_var)
