"""The package version (read by the build, the CLI and the store's records)."""

__version__ = "0.1.0"
