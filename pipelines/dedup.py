"""Near-duplicate clusters of a corpus, the library behind `corpusmill dedup`: ``write_clusters``.

The same code and config section (``near_dedup``) as the pipeline's stage: the input is read with the
pipeline's reader, the decisions are ``transforms.near_dedup``'s. One output line per input document:
{"id": <reported id>, "cluster": <reported id of the kept document>, "kept": true|false}; a kept document is its
own cluster; a document removed for one of an earlier run (``against``) has "cluster_in_earlier_run": true and
the earlier document's internal id as its cluster. A text file byte-identical to another input is read once and
gets a line removed for that file's document.

Two execution paths, as near-dedup has: the in-memory path runs in this process without Beam
(``core.dedup_documents``) when nothing asks for Beam (the local runner, no ``--workers``, no Beam options, no
index to read or write); otherwise the command's Beam graph (``pipelines.dedup_beam``) runs ``NearDedup``, whose
``mode`` picks its in-memory or distributed path.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from beamio.config_base import InputConfig
from beamio.read import InputFile, Quarantined, iter_records, reported_id, resolve_inputs
from pipelines.twins import TextTwins
from runio.files import atomic_output
from runio.heap import numpy_friendly_heap
from transforms.near_dedup.core import NearDedupConfig, chosen_path, dedup_documents


@dataclass(frozen=True)
class Execution:
    """Where the Beam graph runs: the command's ``--runner``, ``--workers``, ``--dask-address``,
    ``--worker-memory`` and its Beam pipeline options."""
    runner: str = "direct"
    workers: Optional[int] = None
    dask_address: Optional[str] = None
    worker_memory: Optional[str] = None
    beam_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClustersWritten:
    """What ``write_clusters`` did: lines written (``documents``: one per input document and copied text file),
    how many kept, the records set aside (the reader's quarantine), and where the work ran: ``busy_seconds``
    (near-dedup's own code, summed over workers) and ``components`` (where the components were found) on Beam,
    both None in this process."""
    documents: int
    kept: int
    quarantined: list[dict]
    seconds: float
    busy_seconds: Optional[float] = None
    components: Optional[str] = None

    @property
    def in_this_process(self) -> bool:
        return self.busy_seconds is None


def removed_for_the_same_document(row: dict, name: str) -> dict:
    """A copied text file's line (``TextTwins``): removed, in the cluster of the file it copies (that file, or the
    document it is removed for, is the one kept)."""
    return {"id": name, "cluster": row["cluster"], "kept": False}


def runs_without_beam(cfg: NearDedupConfig, input_bytes: int, execution: Execution, index_out: Optional[str] = None,
                      against: Sequence[str] = ()) -> bool:
    """The in-memory path on the local runner, without earlier runs' indexes or an index to write: the pure core
    runs in this process on a stream of records (Beam is not even imported; only the sketches are kept). Any
    other runner, ``workers`` or Beam options run the same decisions on Beam."""
    return (execution.runner == "direct" and execution.workers is None and cfg.enabled
            and chosen_path(cfg, input_bytes) == "memory"
            and not index_out and not against and not execution.beam_args)


def write_clusters(cfg: NearDedupConfig, input_cfg: InputConfig, out_path: str, *, index_out: Optional[str] = None,
                   against: Sequence[str] = (), execution: Execution = Execution(),
                   log: Callable[[str], None] = lambda line: None) -> ClustersWritten:
    """Read ``input_cfg``'s inputs, find their near-duplicate clusters with ``cfg`` and write one line per document
    to ``out_path`` (atomically); with ``index_out``, also the index of the kept documents (for a later
    ``against``). ``log`` gets the reader's lines (hidden files left out, copies read once). Raises ConfigError
    for a path that matches nothing or an unusable ``against`` index."""
    twins = TextTwins(removed_for_the_same_document)
    # raises ConfigError naming a path that matches nothing; a byte-identical second file is read once
    files = resolve_inputs(input_cfg.paths, log=log, on_twin=twins.add)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    started = time.perf_counter()
    input_bytes = sum(f.bytes for f in files)
    if runs_without_beam(cfg, input_bytes, execution, index_out, against):
        n_docs, n_kept, quarantined = _write_in_this_process(cfg, input_cfg, files, out_path, twins)
        return ClustersWritten(n_docs, n_kept, quarantined, time.perf_counter() - started)
    # deferred: the Beam graph imports apache_beam (seconds), which the in-process path above never needs
    from pipelines.dedup_beam import write_clusters_on_beam

    n_docs, n_kept, quarantined, busy, components = write_clusters_on_beam(
        cfg, input_cfg, files, out_path, twins, index_out=index_out, against=against, input_bytes=input_bytes,
        runner=execution.runner, workers=execution.workers, dask_address=execution.dask_address,
        worker_memory=execution.worker_memory, beam_args=execution.beam_args)
    return ClustersWritten(n_docs, n_kept, quarantined, time.perf_counter() - started, busy, components)


def _write_in_this_process(cfg: NearDedupConfig, input_cfg: InputConfig, files: list[InputFile], out_path: str,
                           twins: TextTwins) -> tuple[int, int, list[dict]]:
    """Read, ``dedup_documents``, write one line per document in input order. Returns (documents, kept,
    quarantine records)."""
    numpy_friendly_heap(keep_free_top=True)  # this process does nothing else: the sketching stays on the heap
    id_field = input_cfg.id_field
    internal_ids: list[int] = []
    reported: dict[int, object] = {}
    quarantined: list[dict] = []

    def documents():
        for _, _, item in iter_records(input_cfg, files):
            if isinstance(item, Quarantined):
                quarantined.append(item.as_record())
                continue
            internal_ids.append(item["id"])
            reported[item["id"]] = reported_id(item, id_field, default=item["id"])
            yield item

    decisions = dedup_documents(documents(), cfg)
    n_docs = n_kept = 0
    with atomic_output(out_path, "w") as out:
        for doc_id in internal_ids:
            user_id = reported[doc_id]
            decision = decisions.get(doc_id)
            row = ({"id": user_id, "cluster": user_id, "kept": True} if decision is None or not decision.removed
                   else {"id": user_id, "cluster": reported[decision.cluster], "kept": False})
            for line in (row, *twins.rows(row)):
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
                n_docs += 1
                n_kept += line["kept"]
    return n_docs, n_kept, quarantined + twins.quarantined(quarantined)
