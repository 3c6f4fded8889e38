"""The kernel kinds as policies (autotranspose/kinds/): every shipped result keeps its kernel
version, and every kind renders, sizes, searches, serves and validates exactly as the code of
one config class with kind flags did (tests/kinds_snapshot.py, tests/data/kinds_snapshot.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import kinds_snapshot as snap
import pytest

from autotranspose import kinds
from autotranspose.kernels import codegen
from autotranspose.kernels.config import KernelConfig, config_space
from autotranspose.store import textio

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "tuning_db").glob("*.json"))
EXPECTED = json.loads(
    (Path(__file__).resolve().parent / "data" / "kinds_snapshot.json").read_text()
)


def test_both_shipped_files_are_checked():
    assert {p.name for p in SHIPPED} >= {"NVIDIA_H200.json", "NVIDIA_H100_80GB_HBM3.json"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_config_keeps_its_kernel_version(path):
    """Each shipped entry's config, read from the file as stored, renders the kernel whose
    version the file records (the `template_version` field holds the kernel's version)."""
    raw = json.loads(path.read_text())["entries"]
    assert raw, f"{path.name} ships no entries"
    for item in raw:
        config = KernelConfig.from_dict(item["config"])
        version = codegen.kernel_version(config, item.get("problem", ""))
        assert version == item["template_version"], config.key
        assert config.to_dict() == item["config"] or _optional_defaults_left_out(
            config, item["config"]
        )
    # and the store's reader agrees (the test_lookup check: nothing stale)
    assert not [str(e.shape_class) for e in textio.load(path).entries if e.stale]


def _optional_defaults_left_out(config: KernelConfig, stored: dict) -> bool:
    """A stored config that spells out an optional field at its default reads back the same."""
    return KernelConfig.from_dict(config.to_dict()) == KernelConfig.from_dict(stored)


def test_every_shipped_kind_is_registered():
    found = {
        KernelConfig.from_dict(i["config"]).kind
        for p in SHIPPED
        for i in json.loads(p.read_text())["entries"]
    }
    assert found <= set(kinds.names())
    assert found >= {"tiled", "staged", "prmt", "direct"}


@pytest.mark.parametrize("case", snap.space_cases(), ids=lambda c: snap.space_name(*c))
def test_search_spaces_are_unchanged(case):
    """The same configs in the same order, for every element size (aligned, unaligned,
    skinny, narrow and conjugated calls)."""
    assert snap.space_snapshot(*case) == EXPECTED["spaces"][snap.space_name(*case)]


def test_every_space_case_is_in_the_fixture():
    assert sorted(snap.space_name(*c) for c in snap.space_cases()) == sorted(EXPECTED["spaces"])


def test_defaults_and_serving_rules_are_unchanged():
    got = snap.defaults()
    assert got.keys() == EXPECTED["defaults"].keys()
    differ = {k: (got[k], v) for k, v in EXPECTED["defaults"].items() if got[k] != v}
    assert not differ, list(differ.items())[:10]


def test_sampled_configs_render_and_size_as_before():
    """A sample of every kind's configs (every 97th of each space case and every default):
    byte-identical kernel source and single-kernel file, kernel version, name, threads,
    shared memory, registers, tiles, grid and applicability on a set of shapes, neighbours."""
    samples = snap.samples()
    assert sorted(c.key for c in samples) == sorted(EXPECTED["configs"])
    # every kind of the transpose search space (cast kernels have a space of their own)
    assert {c.kind for c in samples} == {k.name for k in kinds.all_kinds() if k.searches()}
    differ = [c for c in samples if snap.facts_digest(c) != EXPECTED["configs"][c.key]]
    assert not differ, [(c.key, snap.config_facts(c)) for c in differ[:3]]


def test_files_of_many_kernels_render_as_before():
    samples = snap.samples()
    assert (
        snap.hashlib.sha256(codegen.render_many(samples).encode()).hexdigest()[:24]
        == EXPECTED["render_many"]
    )
    assert (
        snap.hashlib.sha256(codegen.render_outer(samples).encode()).hexdigest()[:24]
        == EXPECTED["render_outer"]
    )


def test_validation_messages_are_unchanged():
    assert list(snap.validation()) == EXPECTED["validation"]


def test_config_space_still_takes_dtypes():
    assert next(iter(config_space("float32"))).elem_bytes == 4
