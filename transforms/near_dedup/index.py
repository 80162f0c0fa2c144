"""The near-dedup index on disk: what a run writes into its dedup folder and a later refresh reads back.

    sketches-*.parquet    id, signature (bytes), shingles (little-endian uint32 bytes) of every kept document
    bands-*.parquet       key (int64), id: the LSH band (or SimHash block) keys of the same documents
    index_params.json     the parameters that must match for a refresh (``NearDedupConfig.index_params``)

``check_index_params`` refuses an index built with other parameters (when the graph is built);
``ReadIndex`` and ``WriteIndex`` are the Beam transforms, reading and writing through Beam's FileSystems (local
paths or any URI).
"""
from __future__ import annotations

import json
from typing import Sequence

import apache_beam as beam
import numpy as np

from beamio.write import WriteSorted, parquet_writer
from runio.files import write_atomic
from transforms.beam_step import timed
from transforms.near_dedup.blocks import Edges, SketchRows, partition_of, split_columns
from transforms.near_dedup.core import STEP_NAME, NearDedupConfig
from transforms.near_dedup.minhash import Sketch

SKETCH_FILES = "sketches"
BAND_FILES = "bands"
PARAMS_FILE = "index_params.json"


def sketch_row(sketch: Sketch) -> dict:
    little = sketch.signature.astype(sketch.signature.dtype.newbyteorder("<"))
    return {"id": sketch.id, "signature": little.tobytes(), "shingles": sketch.shingles.astype("<u4").tobytes()}


def sketch_rows_of_table(table, cfg: NearDedupConfig):
    """An index's sketch rows (a pyarrow Table of ``id``, ``signature``, ``shingles``) as ``blocks.SketchRows``
    of earlier runs' documents."""
    n = table.num_rows
    ids = np.asarray(table.column("id").to_numpy(), dtype=np.int64)
    wire, native = (np.dtype("<u8"), np.uint64) if cfg.method == "simhash" else (np.dtype("<u4"), np.uint32)
    signatures = np.frombuffer(b"".join(table.column("signature").to_pylist()), dtype=wire).astype(native)
    shingle_bytes = table.column("shingles").to_pylist()
    lengths = np.fromiter(map(len, shingle_bytes), dtype=np.int64, count=n) // 4
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    shingles = np.frombuffer(b"".join(shingle_bytes), dtype="<u4").astype(np.uint32)
    rank_class = np.zeros(n, dtype=np.int8)  # core.doc_rank of an earlier run's document: (0, 0.0, id)
    return SketchRows(ids, rank_class, np.zeros(n), np.ones(n, dtype=bool),
                      signatures.reshape(n, -1) if n else signatures.reshape(0, 1), offsets, shingles)


def check_index_params(index_dir: str, cfg: NearDedupConfig) -> None:
    """Fail early, naming the differing keys, when an earlier run's index was built with other parameters."""
    from apache_beam.io.filesystems import FileSystems

    path = FileSystems.join(index_dir, PARAMS_FILE)
    if not FileSystems.exists(path):
        raise FileNotFoundError(f"{index_dir} is not a near-dedup index (no {PARAMS_FILE}); pass a run's dedup/ folder")
    with FileSystems.open(path) as handle:
        stored = json.loads(handle.read().decode("utf-8"))
    wanted = cfg.index_params()
    differing = {k: (stored.get(k), v) for k, v in wanted.items() if stored.get(k) != v}
    if differing:
        detail = ", ".join(f"{k}: index has {old!r}, config has {new!r}" for k, (old, new) in differing.items())
        raise ValueError(f"near_dedup index {index_dir} was built with other parameters ({detail}); "
                         "refresh with the same near_dedup settings as that run")


def index_bytes(index_dirs: Sequence[str]) -> int:
    """Bytes of the sketch files of these indexes (the auto mode's estimate of their size)."""
    from apache_beam.io.filesystems import FileSystems

    return sum(meta.size_in_bytes for directory in index_dirs for result in FileSystems.match(
        [FileSystems.join(directory, f"{SKETCH_FILES}-*.parquet")]) for meta in result.metadata_list)


def _old_sketch_blocks(table, cfg: NearDedupConfig, parts: int):
    rows = sketch_rows_of_table(table, cfg)
    yield from rows.split(partition_of(rows.ids, parts), parts)


def _old_band_blocks(table, parts: int):
    stored = Edges(np.asarray(table.column("id").to_numpy(), dtype=np.int64),
                   np.asarray(table.column("key").to_numpy(), dtype=np.int64))
    yield from split_columns(stored, partition_of(stored.a, parts), parts)


class ReadIndex(beam.PTransform):
    """Earlier runs' indexes → ``(old_sketches, old_bands)`` blocks by the partition of their ids: ``(partition,
    blocks.SketchRows)`` of earlier runs' documents and ``(partition, blocks.Edges(id, key))`` of their stored
    band keys (``bands=False``: the band files are not read, ``old_bands`` is None). Row groups are read as
    Arrow tables; an id kept by two earlier runs is made one where the blocks meet
    (``blocks.surviving_old_rows``)."""

    def __init__(self, index_dirs: Sequence[str], cfg: NearDedupConfig, parts: int, bands: bool = True):
        super().__init__()
        self.index_dirs, self.cfg, self.parts, self.bands = list(index_dirs), cfg, parts, bands

    def expand(self, pbegin):
        from apache_beam.io.filesystems import FileSystems
        from apache_beam.io.parquetio import ReadFromParquetBatched

        sketch_reads, band_reads = [], []
        for i, directory in enumerate(self.index_dirs):
            pattern = FileSystems.join(directory, f"{SKETCH_FILES}-*.parquet")
            if not FileSystems.match([pattern])[0].metadata_list:
                continue  # a run that kept no document has an empty index: no files (its params file says so)
            sketch_reads.append(pbegin | f"ReadOldSketches{i}" >> ReadFromParquetBatched(pattern))
            if self.bands:
                band_reads.append(pbegin | f"ReadOldBands{i}" >> ReadFromParquetBatched(
                    FileSystems.join(directory, f"{BAND_FILES}-*.parquet")))
        if not sketch_reads:  # no earlier run kept anything
            sketch_reads.append(pbegin | "NoOldSketches" >> beam.Create([]))
            band_reads.append(pbegin | "NoOldBands" >> beam.Create([]))
        old_sketches = (sketch_reads | "FlattenOldSketches" >> beam.Flatten()
                        | "OldSketchBlocks" >> timed(STEP_NAME, _old_sketch_blocks, self.cfg, self.parts))
        if not self.bands:
            return old_sketches, None
        old_bands = (band_reads | "FlattenOldBands" >> beam.Flatten()
                     | "OldBandBlocks" >> timed(STEP_NAME, _old_band_blocks, self.parts))
        return old_sketches, old_bands


INDEX_FILE_BYTES = 32 << 20  # about this much per index file (sketches: ~1.5–7 kB per kept document); a writer holds one file's rows
# A part's size counts what its writer holds, not what the file takes: a band row is 16 bytes in Parquet but a
# dict of two Python ints (~264 bytes, measured with tracemalloc) in the writer. Counted at 16, one file took
# every band row up to 2M of them (410k at the scale benchmark's 16×, ~110 MB on one worker), growing with the
# corpus; counted at what it holds, a writer's part stays near INDEX_FILE_BYTES.
BAND_ROW_HELD_BYTES = 264
SKETCH_ROW_HELD_BYTES = 300  # the row dict, its id and two bytes objects' headers, beside their contents


def index_schemas():
    """The Arrow schemas of the index's sketch files and band files."""
    import pyarrow as pa  # deferred: a run that never writes an index does not import pyarrow here

    return (pa.schema([("id", pa.int64()), ("signature", pa.binary()), ("shingles", pa.binary())]),
            pa.schema([("key", pa.int64()), ("id", pa.int64())]))


def index_params_text(cfg: NearDedupConfig) -> str:
    """``index_params.json``'s content."""
    return json.dumps(cfg.index_params(), sort_keys=True) + "\n"


class WriteIndex(beam.PTransform):
    """``{"sketches": sketch rows, "bands": band rows}`` of the kept documents → the index in ``out_dir``."""

    def __init__(self, out_dir: str, cfg: NearDedupConfig):
        super().__init__()
        self.out_dir, self.cfg = str(out_dir), cfg

    def expand(self, rows):
        from apache_beam.io.filesystems import FileSystems

        out = self.out_dir
        sketch_schema, band_schema = index_schemas()
        # The run's sorted writer (as docs/): files by id % parts, each sorted, the part count from the data, so
        # dedup/ is byte-identical on any runner and number of workers (Beam's WriteToParquet is not).
        rows["sketches"] | "WriteIndexSketches" >> WriteSorted(
            out, SKETCH_FILES, ".parquet", parquet_writer(sketch_schema),
            lambda r: len(r["signature"]) + len(r["shingles"]) + SKETCH_ROW_HELD_BYTES, INDEX_FILE_BYTES)
        rows["bands"] | "WriteIndexBands" >> WriteSorted(
            out, BAND_FILES, ".parquet", parquet_writer(band_schema), lambda r: BAND_ROW_HELD_BYTES,
            INDEX_FILE_BYTES, sort_key=lambda r: (r["id"], r["key"]))
        # Through a temporary sibling and a rename, as every other file of the run (Beam's WriteToText leaves
        # its beam-temp-* folder behind when a worker is killed while writing, and a retry writes another).
        return (rows["sketches"].pipeline
                | "IndexParams" >> beam.Create([json.dumps(self.cfg.index_params(), sort_keys=True)])
                | "WriteIndexParams" >> beam.Map(_write_params, FileSystems.join(out, PARAMS_FILE)))


def _write_params(text: str, path: str) -> str:
    write_atomic(path, (text + "\n").encode("utf-8"))
    return path
