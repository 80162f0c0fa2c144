"""The Beam graph of `corpusmill dedup` (``pipelines.dedup.write_clusters`` when Beam is asked for): read →
``NearDedup`` → one line per document, the lines of the documents removed for a kept one joined to its
reported id. (It imports nothing from ``pipelines.dedup``, which imports it only when Beam is asked for.)"""
from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import tempfile
from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter

from beamio.beam_options import make_pipeline
from pipelines.runners import shuffle_workers
from beamio.config_base import ConfigError, InputConfig
from beamio.read import InputFile, reported_id
from beamio.read_beam import ReadCorpus
from pipelines.twins import TextTwins
from runio.files import atomic_output
from transforms.base import step_annotations
from transforms.near_dedup.beam import NearDedup
from transforms.near_dedup.core import STEP_NAME, NearDedupConfig


def report_id(doc: dict, id_field: str):
    """Its ``id_field``, a text file's name, else the internal id (``beamio.read.reported_id``)."""
    return reported_id(doc, id_field, default=doc["id"])


def _what_a_line_needs(doc: dict, id_field: str) -> dict:
    """A document as far as its output line needs it: its id, the reported id, and its annotations (no text)."""
    return {"id": doc["id"], "meta": {id_field: report_id(doc, id_field)},
            "annotations": doc.get("annotations") or {}}


def _kept_line_or_head(doc: dict, id_field: str):
    """A kept document's line; one that others were removed for (``cluster_size``) goes to ``heads`` instead, for
    the join that gives their lines its reported id (most documents are in no cluster and join nothing)."""
    user_id = report_id(doc, id_field)
    if step_annotations(doc.get("annotations"), STEP_NAME).get("cluster_size"):
        yield beam.pvalue.TaggedOutput("heads", (doc["id"], user_id))
    else:
        yield json.dumps({"id": user_id, "cluster": user_id, "kept": True}, ensure_ascii=False)


def _cluster_lines(element):
    """Per kept document: its own line and the lines of the documents removed for it."""
    cluster_id, groups = element
    kept = list(groups["kept"])
    for user_id in kept:
        yield json.dumps({"id": user_id, "cluster": user_id, "kept": True}, ensure_ascii=False)
    for user_id in groups["removed"]:
        if kept:
            yield json.dumps({"id": user_id, "cluster": kept[0], "kept": False}, ensure_ascii=False)
        else:  # kept by an earlier run: only its internal id is known here
            yield json.dumps({"id": user_id, "cluster": cluster_id, "kept": False, "cluster_in_earlier_run": True},
                             ensure_ascii=False)


def _start_local_cluster(workers: Optional[int], worker_memory: Optional[str]) -> None:
    """The LocalCluster starts (its workers importing Beam) while this process builds the graph. Without the dask
    extra nothing starts here: building the pipeline then says what is missing."""
    try:
        # deferred: beam_dask needs the optional dask extra, absent on installs without it
        from beam_dask.cluster import start_shared_local_cluster
    except ImportError:
        return
    start_shared_local_cluster(workers, worker_memory)


def _has_option(beam_args: Sequence[str], name: str) -> bool:
    return any(arg == name or arg.startswith(name + "=") for arg in beam_args)


def local_runner(dedup: NearDedup, runner: str, workers: Optional[int]) -> tuple[str, Optional[int]]:
    """The in-memory near-dedup path gathers every sketch on one worker: on the local runner, unless workers are
    given, it runs in this process (worker processes would add only their start-up and the transfer of every
    document to them)."""
    if runner == "direct" and workers is None and dedup.cfg.enabled and dedup.path() == "memory":
        return "inprocess", 1
    return runner, workers


def components_where(dedup: NearDedup, counters: dict) -> str:
    """Where the path found the components: the size of the Beam path's last, single-worker label merge is
    ``cc_max_rounds``' trade-off."""
    if dedup.path() == "memory":
        return "components on one worker, the in-memory path"
    return (f"{counters.get('cc_crossing_edges', 0)} label pairs in the last component merge after "
            f"{dedup.cfg.cc_max_rounds} star rounds")


def write_clusters_on_beam(cfg: NearDedupConfig, input_cfg: InputConfig, files: list[InputFile], out_path: str,
                           twins: TextTwins, *, index_out: Optional[str], against: Sequence[str], input_bytes: int,
                           runner: str, workers: Optional[int], dask_address: Optional[str],
                           worker_memory: Optional[str], beam_args: Sequence[str]
                           ) -> tuple[int, int, list[dict], float, str]:
    """The command's graph on ``runner`` (``pipelines.dedup.Execution``'s fields); returns (documents, kept,
    quarantine records, near-dedup's busy seconds summed over workers, where the components were found)."""
    if runner == "dask" and not dask_address:
        _start_local_cluster(workers, worker_memory)
    id_field = input_cfg.id_field
    work = tempfile.mkdtemp(prefix=".dedup-", dir=os.path.dirname(os.path.abspath(out_path)))
    try:
        try:
            dedup = NearDedup(cfg, index_out_dir=index_out, against_dirs=against, input_bytes=input_bytes,
                              carry=functools.partial(_what_a_line_needs, id_field=id_field))
        except (FileNotFoundError, ValueError) as err:
            raise ConfigError(str(err)) from None
        runner, workers = local_runner(dedup, runner, workers)  # (the path, hence the runner, counts the indexes)
        dedup.workers = shuffle_workers(runner, workers, dask_address)  # its partitions: as many per worker
        parts = dedup.partitions()
        # On Dask every shuffle of this command has near-dedup's partition count (one per 64 MB of input, as many
        # for each worker): its blocks are a few elements per partition, and each shuffle costs the runner that
        # count squared in tasks
        pipeline = make_pipeline(runner, workers, list(beam_args), dask_address=dask_address,
                                 worker_memory=worker_memory, input_bytes=input_bytes,
                                 partitions=None if _has_option(beam_args, "--dask_partitions") else parts)
        # Many files per partition: each worker already reads a share, and the sketching fuses with the reading
        read = pipeline | "Read" >> ReadCorpus(input_cfg, files, spread_documents=len(files) < 2 * parts)
        result = read["docs"] | "NearDedup" >> dedup
        kept = result["kept"] | "KeptIds" >> beam.FlatMap(_kept_line_or_head, id_field).with_outputs(
            "heads", main="lines")
        removed = result["removed"] | "RemovedIds" >> beam.Map(
            lambda d: (step_annotations(d["annotations"], STEP_NAME)["cluster"], report_id(d, id_field)))
        clustered = (
            {"kept": kept.heads, "removed": removed}
            | "ByCluster" >> beam.CoGroupByKey()
            | "Lines" >> beam.FlatMap(_cluster_lines)
        )
        ((kept.lines, clustered) | "AllLines" >> beam.Flatten()
         | "Write" >> beam.io.WriteToText(os.path.join(work, "clusters"), file_name_suffix=".jsonl"))
        read["quarantined"] | "WriteQuarantine" >> beam.Map(json.dumps) | "WriteQ" >> beam.io.WriteToText(
            os.path.join(work, "quarantined"), file_name_suffix=".jsonl")
        outcome = pipeline.run()
        outcome.wait_until_finish()

        n_docs = n_kept = 0
        with atomic_output(out_path, "w") as out:
            for part in sorted(glob.glob(os.path.join(work, "clusters*.jsonl"))):
                with open(part, encoding="utf-8") as fh:
                    for line in fh:
                        out.write(line)
                        n_docs += 1
                        n_kept += '"kept": true' in line
                        for row in twins.rows(json.loads(line)) if twins.of else ():
                            out.write(json.dumps(row, ensure_ascii=False) + "\n")
                            n_docs += 1
        quarantined = [json.loads(line) for part in glob.glob(os.path.join(work, "quarantined*.jsonl"))
                       for line in open(part, encoding="utf-8")]
        quarantined += twins.quarantined(quarantined)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    counters: dict[str, int] = {}
    for r in outcome.metrics().query(MetricsFilter().with_namespace(STEP_NAME))["counters"]:
        counters[r.key.metric.name] = counters.get(r.key.metric.name, 0) + (r.committed or 0)  # summed over steps
    return n_docs, n_kept, quarantined, counters.get("busy_ms", 0) / 1000, components_where(dedup, counters)
