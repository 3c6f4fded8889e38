"""Tuning files: export, import, round trips between databases, and validation of input."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from store_data import A100, H100, ok, random_config, sample_shape

from autotranspose.errors import StoreError
from autotranspose.kernels.config import KernelConfig
from autotranspose.kernels.shapes import ShapeClass
from autotranspose.store import Store, hooks, ingest, textio, writes

pytest_plugins = ("store_fixtures",)
pytestmark = pytest.mark.usefixtures("isolated_home")


def _populate(store: Store, rng, template_version, results: int = 40) -> None:
    """Random results on two GPUs, several element sizes and classes, plus one stale entry."""
    for device in (H100, A100):
        run = store.begin_run(device, {"seed": 0})
        for _ in range(results):
            elem_bytes = int(rng.choice([1, 2, 4, 8, 16]))
            vec = int(rng.choice([v for v in (1, 2, 4, 8, 16) if v * elem_bytes <= 16]))
            shape, cls = sample_shape(rng, vec)
            dtype = {1: "int8", 2: "float16", 4: "float32", 8: "float64", 16: "complex128"}
            config = random_config(rng, elem_bytes, vec)
            store.record(
                run,
                device,
                dtype[elem_bytes],
                elem_bytes,
                shape,
                cls,
                config,
                ok(float(rng.uniform(100, 3000)), float(rng.uniform(3000, 3300))),
            )
        store.finish_run(run, "done")
    template_version("0123456789abcdef")  # an entry from older kernels
    cls = ShapeClass(4, 4, 4, 1)
    store.record(None, H100, "float32", 4, (3, 3, 3), cls, random_config(rng, 4, 1), ok(5.0))
    template_version()


def test_dump_writes_one_sorted_file_per_gpu(tmp_path, rng, template_version):
    with Store.open(tmp_path / "src.db") as src:
        _populate(src, rng, template_version)
        files = textio.dump(src, tmp_path / "tuning_db")
        assert sorted(f.name for f in files) == [f"{A100.slug}.json", f"{H100.slug}.json"]
        for path in files:
            text = path.read_text()
            doc = json.loads(text)
            assert text == textio.dumps(doc) and text.endswith("}\n")  # canonical form
            assert doc["format"] == "autotranspose-tuning/1" and set(doc) == {
                "format",
                "device",
                "entries",
            }
            keys = [(e["elem_bytes"], ShapeClass.parse(e["shape_class"])) for e in doc["entries"]]
            assert keys == sorted(keys) and len(set(keys)) == len(keys)
            assert all(
                e["template_version"] == hooks.kernel_version(KernelConfig.from_dict(e["config"]))
                for e in doc["entries"]
            )
            assert list(doc["entries"][0]) == sorted(doc["entries"][0])
        # include_stale keeps the entry older kernels made
        stale = textio.export(src, H100.name, include_stale=True)["entries"]
        assert len(stale) == len(textio.export(src, H100.name)["entries"]) + 1


def test_dump_on_a_full_disk_leaves_no_half_file(tmp_path, rng, template_version, monkeypatch):
    import errno

    with Store.open(tmp_path / "src.db") as src:
        _populate(src, rng, template_version, results=3)

        real = Path.write_text

        def full(self, data, *args, **kwargs):  # half the file fits
            real(self, data[: len(data) // 2], *args, **kwargs)
            raise OSError(errno.ENOSPC, "No space left on device", str(self))

        monkeypatch.setattr(Path, "write_text", full)
        with pytest.raises(OSError, match="No space left"):
            textio.dump(src, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("direction", ["sqlite-to-target-and-back"])
def test_round_trip_through_files_is_exact(tmp_path, rng, template_version, db_url, direction):
    """SQLite -> files -> target database (SQLite or PostgreSQL) -> files -> SQLite: same bytes."""
    with Store.open(tmp_path / "src.db") as src:
        _populate(src, rng, template_version)
        first = textio.dump(src, tmp_path / "a")
        src_entries = src.entries(include_stale=False)
    with Store.open(db_url) as target:
        for path in first:
            assert textio.import_into(target, path) > 0
        second = textio.dump(target, tmp_path / "b")
        assert len(target.entries(include_stale=False)) == len(src_entries)
    with Store.open(tmp_path / "back.db") as back:
        for path in second:
            textio.import_into(back, textio.load(path))
        third = textio.dump(back, tmp_path / "c")
        back_entries = back.entries()
    for a, b, c in zip(first, second, third, strict=True):
        assert a.name == b.name == c.name
        assert a.read_text() == b.read_text() == c.read_text()
    assert [(e.device, e.elem_bytes, e.shape_class, e.config) for e in back_entries] == [
        (e.device, e.elem_bytes, e.shape_class, e.config) for e in src_entries
    ]


def test_export_picks_one_device(tmp_path, rng, template_version):
    with Store.open(tmp_path / "t.db") as store:
        with pytest.raises(StoreError, match="no tuned results"):
            textio.export(store)
        _populate(store, rng, template_version, results=5)
        with pytest.raises(StoreError, match="several devices"):
            textio.export(store)
        doc = textio.export(store, A100.name)
        assert doc["device"] == A100.to_dict()
        with pytest.raises(StoreError, match="no device"):
            textio.export(store, "NVIDIA Imaginary")
        # what `autotranspose export` writes (indent 2) reads back
        assert textio.loads(json.dumps(doc, indent=2, sort_keys=True)).device == A100


def test_import_keeps_the_better_and_the_current(tmp_path, rng, template_version):
    with Store.open(tmp_path / "t.db") as store:
        shape, cls = sample_shape(rng)
        store.record(
            None, H100, "float32", 4, shape, cls, random_config(rng, 4, cls.vec), ok(1000.0)
        )
        doc = textio.export(store)
        faster, slower, stale = (copy.deepcopy(doc) for _ in range(3))
        for d, gbps in ((faster, 2000.0), (slower, 10.0), (stale, 2999.0)):
            entry = d["entries"][0]
            entry.update(gbps=gbps, ratio=round(gbps / entry["copy_gbps"], 4))
        stale["entries"][0]["template_version"] = "feedfeedfeedfeed"
        textio.import_into(store, slower)
        assert store.best(H100.name, 4, cls).gbps == 1000.0
        textio.import_into(store, stale)  # older kernels never displace current results
        assert store.best(H100.name, 4, cls).gbps == 1000.0
        textio.import_into(store, faster)
        assert store.best(H100.name, 4, cls).gbps == 2000.0


def _valid_doc(rng) -> dict:
    entries = []
    for vec in (1, 2, 4):
        shape, cls = sample_shape(rng, vec)
        config = random_config(rng, 4, vec)
        entries.append(
            {
                "elem_bytes": 4,
                "shape_class": str(cls),
                "shape": list(shape),
                "config": config.to_dict(),
                "gbps": 1500.5,
                "copy_gbps": 3000.0,
                "ratio": 0.5002,
                "dtype": "float32",
                "template_version": hooks.kernel_version(config),
                "measured_at": "2025-01-02T03:04:05.123456+00:00",
            }
        )
    return {"format": textio.FORMAT, "device": H100.to_dict(), "entries": entries}


def _set(path: str, value):
    def change(doc: dict) -> None:
        *parents, last = path.split(".")
        node = doc
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        node[int(last) if last.isdigit() else last] = value

    return change


def _delete(path: str):
    def change(doc: dict) -> None:
        *parents, last = path.split(".")
        node = doc
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        del node[last]

    return change


def _huge_ratio(doc: dict) -> None:
    """A transpose 100x faster than a copy of the same bytes, consistently written."""
    doc["entries"][1].update(gbps=3000.0, copy_gbps=30.0, ratio=100.0)


def _huge_shape(doc: dict) -> None:
    """A matrix of 2**60 elements (no GPU holds it), in its matching class."""
    doc["entries"][0].update(
        shape=[1 << 20, 1 << 20, 1 << 20], shape_class="1048576x1048576x1048576/v1"
    )


BAD_DOCUMENTS = {
    "format": (_set("format", "autotranspose-tuning/99"), "format"),
    "top-level key": (_set("extra", 1), "unknown top-level"),
    "device name": (_set("device.name", "GPU'; DROP TABLE at_best; --"), "device"),
    "device field": (_set("device.shell", "rm -rf /"), "device"),
    "device type": (_set("device", ["NVIDIA H100"]), "device"),
    "entries type": (_set("entries", {"0": {}}), "entries must be a list"),
    "entry type": (_set("entries.1", "1x8x8/v4"), "entry 1"),
    "tile_m injection": (_set("entries.1.config.tile_m", '32; system("id")'), "entry 1"),
    "unknown config key": (_set("entries.2.config.unroll", 4), "entry 2"),
    "huge number": (_set("entries.0.config.tile_n", 10**40), "entry 0"),
    "config elem_bytes": (_set("entries.0.config.elem_bytes", 8), "entry 0"),
    "shape class injection": (_set("entries.1.shape_class", "1x2x3/v4;DROP"), "entry 1"),
    "shape class vs shape": (_set("entries.0.shape", [1, 1, 1]), "entry 0"),
    "shape type": (_set("entries.0.shape", "1x2x3"), "entry 0"),
    "negative gbps": (_set("entries.2.gbps", -1.0), "entry 2"),
    "overflowing gbps": (_set("entries.2.gbps", "<1e999>"), "entry 2"),  # parses as inf
    "bool ratio": (_set("entries.2.ratio", True), "entry 2"),
    "string gbps": (_set("entries.2.gbps", "fast"), "entry 2"),
    "template version": (_set("entries.1.template_version", "{{ evil }}"), "entry 1"),
    "measured_at": (_set("entries.1.measured_at", "yesterday"), "entry 1"),
    "dtype": (_set("entries.1.dtype", "float32; rm"), "entry 1"),
    "unknown entry key": (_set("entries.1.source", "x"), "entry 1"),
    "missing key": (_delete("entries.2.config"), "entry 2"),
    "missing elem_bytes": (_delete("entries.0.elem_bytes"), "entry 0"),
    # numbers beyond what any GPU does
    "l2_bytes beyond int64": (_set("device.l2_bytes", 2**70), "l2_bytes"),
    "negative threads per block": (
        _set("device.max_threads_per_block", -5),
        "max_threads_per_block",
    ),
    "zero threads per block": (_set("device.max_threads_per_block", 0), "max_threads_per_block"),
    "negative multiprocessors": (_set("device.multiprocessors", -1), "multiprocessors"),
    "memory clock beyond int32": (_set("device.memory_clock_khz", 2**31), "memory_clock_khz"),
    "gbps beyond any GPU": (_set("entries.2.gbps", 1e308), "entry 2: gbps"),
    "copy_gbps beyond any GPU": (_set("entries.0.copy_gbps", 2e5), "entry 0: copy_gbps"),
    "ratio without a copy": (_set("entries.0.copy_gbps", 0), "entry 0: ratio"),
    "NaN-like copy_gbps": (_set("entries.0.copy_gbps", "<1e999>"), "entry 0: copy_gbps"),
    "ratio not gbps/copy_gbps": (_set("entries.1.ratio", 0.9), "entry 1: ratio"),
    "ratio beyond any kernel": (_huge_ratio, "entry 1: ratio"),
    "shape beyond any GPU's memory": (_huge_shape, "entry 0: shape"),
}


@pytest.mark.parametrize("name", list(BAD_DOCUMENTS))
def test_bad_documents_are_rejected_whole(tmp_path, rng, name):
    change, match = BAD_DOCUMENTS[name]
    doc = _valid_doc(rng)
    textio.parse(copy.deepcopy(doc))  # the unchanged document is fine
    change(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc).replace('"<1e999>"', "1e999"))  # parses as inf
    with Store.open(tmp_path / "t.db") as store:
        with pytest.raises(StoreError, match=match) as info:
            textio.import_into(store, path)
        assert str(path) in str(info.value) and "nothing was imported" in str(info.value)
        assert store.entries() == [] and store.devices() == []  # nothing written


def test_duplicate_entries_are_rejected(rng):
    doc = _valid_doc(rng)
    doc["entries"].append(copy.deepcopy(doc["entries"][1]))
    with pytest.raises(StoreError, match="entry 3 repeats entry 1"):
        textio.parse(doc)


@pytest.mark.parametrize(
    "text", ['{"format": NaN}', "[" * 50000, "not json", '{"a": Infinity}', ""]
)
def test_non_json_is_rejected(text):
    with pytest.raises(StoreError, match=r"not a JSON tuning file|tuning file is a JSON object"):
        textio.loads(text, source="x.json")


def test_import_is_one_transaction(tmp_path, rng, monkeypatch):
    """A failure after every entry was written rolls all of them back. The configs, stored
    in a transaction of their own first, may stay: rows that nothing names."""
    doc = _valid_doc(rng)
    real = ingest.offer_bests

    def failing(*args, **kwargs):
        real(*args, **kwargs)
        raise RuntimeError("disk on fire")

    with Store.open(tmp_path / "t.db") as store:
        monkeypatch.setattr(ingest, "offer_bests", failing)
        with pytest.raises(RuntimeError, match="disk on fire"):
            textio.import_into(store, doc)
        monkeypatch.setattr(ingest, "offer_bests", real)
        assert store.entries() == [] and store.devices() == []
        with store.engine.connect() as conn:
            for table in ("at_runs", "at_measurements", "at_best"):
                assert conn.exec_driver_sql(f"SELECT COUNT(*) FROM {table}").scalar() == 0
            keys = {r[0] for r in conn.exec_driver_sql("SELECT key FROM at_configs")}
        assert keys <= {KernelConfig.from_dict(e["config"]).key for e in doc["entries"]}
        assert textio.import_into(store, doc) == 3
        assert len(store.entries()) == 3


def test_shipped_and_exported_numbers_are_within_bounds(tmp_path, rng, template_version):
    """The bounds refuse nothing real: the shipped files and a fresh export parse."""
    for path in sorted((Path(__file__).parents[1] / "tuning_db").glob("*.json")):
        assert textio.load(path).entries
    with Store.open(tmp_path / "t.db") as store:
        _populate(store, rng, template_version)
        # tiny shapes move a few bytes in microseconds: bandwidths round to a few digits
        store.record(
            None,
            H100,
            "int8",
            1,
            (1, 1, 3),
            ShapeClass(1, 1, 4, 1),
            random_config(rng, 1, 1),
            ok(0.0123, 0.0171),
        )
        for doc in textio.export_all(store, include_stale=True).values():
            assert textio.parse(json.loads(textio.dumps(doc))).entries


def test_a_bad_device_never_overwrites_the_stored_one(db_url, rng):
    """A refused file leaves the device row and the results as they were."""
    with Store.open(db_url) as store:
        shape, cls = sample_shape(rng)
        store.record(
            None, H100, "float32", 4, shape, cls, random_config(rng, 4, cls.vec), ok(999.0)
        )
        before = (store.devices(), store.entries())
        for field, value in (("max_threads_per_block", -5), ("l2_bytes", 2**70)):
            doc = textio.export(store)
            doc["device"][field] = value
            doc["entries"][0]["gbps"] = 2000.0  # would be a new best
            doc["entries"][0]["ratio"] = round(2000.0 / doc["entries"][0]["copy_gbps"], 4)
            with pytest.raises(StoreError, match=f"device: {field}.*nothing was imported"):
                textio.import_into(store, doc)
        assert (store.devices(), store.entries()) == before


def test_a_file_larger_than_the_cap_is_refused(tmp_path):
    path = tmp_path / "huge.json"
    with path.open("wb") as f:
        f.truncate(textio.MAX_FILE_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(StoreError, match=r"larger than 64 MiB.*nothing was imported"):
        textio.load(path)


def test_import_files_validates_every_file_before_writing(tmp_path, rng, db_url):
    """`import good.json bad.json` writes nothing: the second file is checked before the first
    is written."""
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_valid_doc(rng)))
    doc = _valid_doc(rng)
    doc["entries"][1]["gbps"] = 1e308
    bad.write_text(json.dumps(doc))
    with Store.open(db_url) as store:
        with pytest.raises(StoreError, match=f"{bad}: entry 1: gbps.*nothing was imported"):
            textio.import_files(store, [good, bad])
        assert store.entries() == [] and store.devices() == []
        assert textio.import_files(store, [good]) == [3]


def test_import_files_is_one_transaction(tmp_path, rng, db_url, monkeypatch):
    """A failure while writing the second file rolls the first back too."""
    docs = [_valid_doc(rng), _valid_doc(rng)]
    docs[1]["device"] = A100.to_dict()
    real = writes.upsert_device

    def failing(conn, info):
        if info == A100:
            raise RuntimeError("disk on fire")
        return real(conn, info)

    with Store.open(db_url) as store:
        monkeypatch.setattr(writes, "upsert_device", failing)
        with pytest.raises(RuntimeError, match="disk on fire"):
            textio.import_files(store, docs)
        monkeypatch.setattr(writes, "upsert_device", real)
        assert store.entries() == [] and store.devices() == []
        assert textio.import_files(store, docs) == [3, 3]
        assert {e.device for e in store.entries()} == {H100.name, A100.name}


def test_import_files_of_one_device_keep_the_fastest(tmp_path, rng, db_url):
    """Two files naming the same entries: each key ends with the faster of the two."""
    first = _valid_doc(rng)
    second = copy.deepcopy(first)
    for a, b in zip(first["entries"], second["entries"], strict=True):
        a["gbps"], b["gbps"] = (float(x) for x in rng.permutation([1000.0, 2000.0]))
        for e in (a, b):
            e["ratio"] = round(e["gbps"] / e["copy_gbps"], 4)
    with Store.open(db_url) as store:
        assert textio.import_files(store, [first, second]) == [3, 3]
        assert sorted(e.gbps for e in store.entries()) == [2000.0] * 3


# (stored best: None / "current" / "stale", imported: "current" / "stale", its gbps) -> winner
RULE = [
    ("current", "current", 2000.0, "imported"),
    ("current", "current", 10.0, "stored"),
    ("current", "stale", 2999.0, "stored"),  # older kernels never displace current results
    ("stale", "current", 10.0, "imported"),  # a current result beats a stale one at any speed
    ("stale", "stale", 2000.0, "imported"),
    ("stale", "stale", 10.0, "stored"),
    (None, "stale", 10.0, "imported"),
]


def test_import_offers_every_entry_by_the_rule_of_record(db_url, rng, template_version):
    """One file of many keys, each meeting another kind of stored best (bulk writes)."""
    doc = {"format": textio.FORMAT, "device": H100.to_dict(), "entries": []}
    want = {}
    with Store.open(db_url) as store:
        for i, (stored, imported, gbps, winner) in enumerate(RULE):
            shape = (1, 64 << i, 64)
            cls = ShapeClass(1, 64 << i, 64, 4)
            if stored is not None:
                template_version("0123456789abcdef" if stored == "stale" else None)
                store.record(
                    None,
                    H100,
                    "float32",
                    4,
                    shape,
                    cls,
                    random_config(rng, 4, 4),
                    ok(1000.0, 3000.0),
                )
                template_version()
            config = random_config(rng, 4, 4)
            current = hooks.kernel_version(config)
            doc["entries"].append(
                {
                    "elem_bytes": 4,
                    "shape_class": str(cls),
                    "shape": list(shape),
                    "config": config.to_dict(),
                    "gbps": gbps,
                    "copy_gbps": 3000.0,
                    "ratio": round(gbps / 3000.0, 4),
                    "dtype": "float32",
                    "template_version": current if imported == "current" else "feedfeedfeedfeed",
                    "measured_at": "2025-01-02T03:04:05+00:00",
                }
            )
            want[cls] = gbps if winner == "imported" else 1000.0
        assert textio.import_into(store, doc) == len(RULE)
        assert {e.shape_class: e.gbps for e in store.entries()} == want
