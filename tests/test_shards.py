"""Contract 3: shard writer, memory-mapped reader, and the errors a damaged shard directory must produce."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tokenizer import shards as shards_mod
from tokenizer.shards import ShardFormatError, ShardReader, write_shards

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = dict(vocab_size=1000, pad_id=0, bos_id=1, eos_id=2, tokenizer_sha256="a" * 64,
                packing={"algorithm": "test"})


def random_rows(n: int, seq_len: int, seed: int = 0, vocab: int = 1000):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        k = int(rng.integers(1, 5))
        cuts = np.sort(rng.choice(np.arange(1, seq_len + 1), size=k, replace=False))
        doc_lens = np.diff(np.concatenate([[0], cuts])).tolist()
        used = int(sum(doc_lens))
        tokens = np.zeros(seq_len, dtype=np.int64)
        tokens[:used] = rng.integers(3, vocab, size=used)
        rows.append((tokens, doc_lens, [i * 10 + j for j in range(k)]))
    return rows


@pytest.fixture
def small_batches(monkeypatch):
    monkeypatch.setattr(shards_mod, "RECORD_BATCH_ROWS", 7)  # several record batches per shard


def test_round_trip_across_shards_and_batches(tmp_path, small_batches):
    rows = random_rows(53, 32)
    manifest = write_shards(tmp_path, rows, split="train", seq_len=32, rows_per_shard=20, **SETTINGS)
    assert [s["file"] for s in manifest["splits"]["train"]] == [f"train-0000{k}.arrow" for k in range(3)]
    assert manifest["dtype"] == "uint16"
    assert manifest["totals"]["train"]["rows"] == 53
    assert manifest["totals"]["train"]["tokens"] == sum(sum(r[1]) for r in rows)
    reader = ShardReader(tmp_path)
    assert len(reader) == 53 and reader.seq_len == 32 and reader.dtype == np.uint16
    for i in [0, 6, 7, 19, 20, 52, -1]:
        tokens, doc_lens, doc_ids = reader.row(i)
        want = rows[i]
        assert tokens.dtype == np.uint16 and doc_lens.dtype == np.int32 and doc_ids.dtype == np.int64
        np.testing.assert_array_equal(tokens, want[0])
        assert doc_lens.tolist() == want[1] and doc_ids.tolist() == want[2]
    tokens, _, _ = reader.row(8)
    assert not tokens.flags.owndata and not tokens.flags.writeable  # a view into the memory map
    reader.verify()
    with pytest.raises(IndexError):
        reader.row(53)


def test_uint32_when_vocab_exceeds_uint16(tmp_path):
    rows = [(np.array([70000, 5, 0, 0]), [2], [9])]
    settings = {**SETTINGS, "vocab_size": 70001}
    manifest = write_shards(tmp_path, rows, split="train", seq_len=4, rows_per_shard=10, **settings)
    assert manifest["dtype"] == "uint32"
    tokens, _, _ = ShardReader(tmp_path).row(0)
    assert tokens.dtype == np.uint32 and tokens[0] == 70000


def test_splits_accumulate_and_rewrites_drop_stale_shards(tmp_path):
    write_shards(tmp_path, random_rows(30, 16), split="train", seq_len=16, rows_per_shard=10, **SETTINGS)
    write_shards(tmp_path, random_rows(4, 16, seed=1), split="val", seq_len=16, rows_per_shard=10, **SETTINGS)
    assert len(ShardReader(tmp_path, "train")) == 30 and len(ShardReader(tmp_path, "val")) == 4
    manifest = write_shards(tmp_path, random_rows(12, 16), split="train", seq_len=16, rows_per_shard=10, **SETTINGS)
    assert sorted(manifest["splits"]) == ["train", "val"]
    assert not (tmp_path / "train-00002.arrow").exists()
    assert len(ShardReader(tmp_path, "train")) == 12
    with pytest.raises(ShardFormatError, match="different settings"):
        write_shards(tmp_path, random_rows(2, 8), split="val", seq_len=8, rows_per_shard=10, **SETTINGS)
    with pytest.raises(ShardFormatError, match="no split 'test'"):
        ShardReader(tmp_path, "test")


def test_writer_rejects_malformed_rows(tmp_path):
    kw = dict(split="train", seq_len=4, rows_per_shard=10, **SETTINGS)
    with pytest.raises(ValueError, match="shape"):
        write_shards(tmp_path, [(np.zeros(5, int), [1], [1])], **kw)
    with pytest.raises(ValueError, match="sum to 6"):
        write_shards(tmp_path, [(np.ones(4, int), [3, 3], [1, 2])], **kw)
    with pytest.raises(ValueError, match="out of range"):
        write_shards(tmp_path, [(np.array([5000, 0, 0, 0]), [1], [1])], **kw)
    with pytest.raises(ValueError, match="pad_id"):
        write_shards(tmp_path, [(np.array([5, 6, 7, 8]), [2], [1])], **kw)
    assert not any(p.name.endswith(".arrow") or ".tmp" in p.name for p in tmp_path.iterdir())


def _written(tmp_path, n=40):
    write_shards(tmp_path, random_rows(n, 64), split="train", seq_len=64, rows_per_shard=15, **SETTINGS)
    return tmp_path


def test_corrupted_byte_is_named_by_verify(tmp_path):
    shard = _written(tmp_path) / "train-00001.arrow"
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the token buffer: the file still opens
    shard.write_bytes(bytes(data))
    reader = ShardReader(tmp_path)
    with pytest.raises(ShardFormatError, match=r"train-00001\.arrow: sha256"):
        reader.verify()


def test_missing_shard_is_named(tmp_path):
    os.remove(_written(tmp_path) / "train-00002.arrow")
    with pytest.raises(ShardFormatError, match=r"train-00002\.arrow: shard listed in the manifest is missing"):
        ShardReader(tmp_path)


def test_truncated_shard_is_named(tmp_path):
    shard = _written(tmp_path) / "train-00000.arrow"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 100])
    with pytest.raises(ShardFormatError, match=r"train-00000\.arrow: .* bytes on disk.*truncated"):
        ShardReader(tmp_path)
    # Even without the size in the manifest, Arrow's own check names the file.
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    for entry in manifest["splits"]["train"]:
        entry.pop("bytes")
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ShardFormatError, match=r"train-00000\.arrow: not a readable Arrow IPC file"):
        ShardReader(tmp_path)


def test_manifest_from_another_tokenizer_or_version(tmp_path):
    _written(tmp_path)
    with pytest.raises(ShardFormatError, match="another tokenizer"):
        ShardReader(tmp_path, expected_tokenizer_sha256="b" * 64)
    assert ShardReader(tmp_path, expected_tokenizer_sha256="a" * 64).tokenizer_sha256 == "a" * 64
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["format_version"] = 99
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ShardFormatError, match="format_version 99 is not supported"):
        ShardReader(tmp_path)
    os.remove(tmp_path / "manifest.json")
    with pytest.raises(ShardFormatError, match="no shard manifest"):
        ShardReader(tmp_path)


RSS_PROBE = textwrap.dedent(
    """
    import sys, numpy as np
    sys.path.insert(0, {root!r})
    from tokenizer.shards import ShardReader

    def status_kib(field):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

    try:  # reset the peak (VmHWM) to the current RSS, so the peak below belongs to the reads alone
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    before = status_kib("VmRSS")
    reader = ShardReader({shard_dir!r})
    rng = np.random.default_rng(0)
    checksum = 0
    for i in rng.integers(0, {span}, size=200):
        tokens, doc_lens, doc_ids = reader.row(int(i))
        checksum += int(tokens[0]) + int(tokens[-1]) + int(doc_lens.sum()) + int(doc_ids[0])
    {extra}
    print(max(status_kib("VmHWM"), status_kib("VmRSS")) - before, checksum)
    """
)


def _peak_rss_growth_kib(shard_dir, span: int, extra: str = "") -> int:
    probe = RSS_PROBE.format(root=ROOT, shard_dir=str(shard_dir), span=span, extra=extra)
    out = subprocess.run([sys.executable, "-c", probe],
                         check=True, capture_output=True, text=True).stdout.split()
    return int(out[0])


def test_row_reads_are_memory_mapped_peak_rss_does_not_grow_with_shard_size(tmp_path):
    seq_len = 2048

    def rows(n):
        block = np.arange(seq_len, dtype=np.int64) % 997 + 3
        for i in range(n):
            yield block, [seq_len], [i]

    small, large = tmp_path / "small", tmp_path / "large"
    write_shards(small, rows(1024), split="train", seq_len=seq_len, rows_per_shard=1 << 20, **SETTINGS)
    write_shards(large, rows(8192), split="train", seq_len=seq_len, rows_per_shard=1 << 20, **SETTINGS)
    size_small = (small / "train-00000.arrow").stat().st_size
    size_large = (large / "train-00000.arrow").stat().st_size
    assert size_large - size_small > 28 << 20
    # The same 200 random rows (among the first 1024) from a 4 MiB and a 32 MiB shard: opening and reading must
    # cost the same memory. A reader that loaded the shard would grow by the 28 MiB difference.
    growth_small = _peak_rss_growth_kib(small, span=1024)
    growth_large = _peak_rss_growth_kib(large, span=1024)
    assert growth_large - growth_small < 4 << 10, (growth_small, growth_large)


def test_reader_pickles_by_reopening(tmp_path):
    import pickle

    rows = random_rows(5, 16)
    write_shards(tmp_path, rows, split="train", seq_len=16, rows_per_shard=2, **SETTINGS)
    copy = pickle.loads(pickle.dumps(ShardReader(tmp_path, expected_tokenizer_sha256="a" * 64)))
    assert len(copy) == 5 and copy.row(4)[2].tolist() == rows[4][2]


def test_any_flipped_byte_is_a_shard_format_error(tmp_path):
    """Header, buffers, footer: wherever a byte flips, open or verify raises ShardFormatError naming the shard."""
    write_shards(tmp_path, random_rows(40, 64), split="train", seq_len=64, rows_per_shard=40, **SETTINGS)
    shard = tmp_path / "train-00000.arrow"
    original = shard.read_bytes()
    positions = sorted(set(range(0, len(original), len(original) // 40)) | set(range(len(original) - 300, len(original), 10)))
    for pos in positions:
        damaged = bytearray(original)
        damaged[pos] ^= 0xFF
        shard.write_bytes(bytes(damaged))
        with pytest.raises(ShardFormatError, match=r"train-00000\.arrow"):
            ShardReader(tmp_path).verify()


def test_count_documents_of_a_split(tmp_path):
    """What the report asks of a manifest without per-split document counts, through the shard reader API."""
    from tokenizer.shards import count_documents, read_manifest

    rows = random_rows(30, 16)
    rows[5] = (rows[5][0], rows[5][1], [rows[4][2][0]] * len(rows[5][1]))  # a document cut across two rows
    manifest = write_shards(tmp_path, rows, split="train", seq_len=16, rows_per_shard=7, **SETTINGS)
    entries = manifest["splits"]["train"]
    assert len(entries) == 5 and read_manifest(tmp_path) == manifest
    assert count_documents(tmp_path, entries) == len({i for _, _, ids in rows for i in ids})
    assert count_documents(tmp_path, []) == 0
    os.remove(tmp_path / entries[2]["file"])
    with pytest.raises(ShardFormatError, match=entries[2]["file"]):
        count_documents(tmp_path, entries)
