"""`python -m autotranspose`: the same command line as the `autotranspose` script."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
