"""`corpusmill dedup INPUT --out CLUSTERS.jsonl`: run only the near-duplicate stage and write its clusters.

The same code path and config section (`near_dedup`) as the pipeline: the input is read with the pipeline's
reader (JSONL/.gz/.zst, Parquet, folders of .txt), then `transforms.near_dedup.NearDedup` runs on Beam.
One output line per input document: {"id": <value of --id-field>, "cluster": <id of the kept document>,
"kept": true|false}; a kept document is its own cluster. A document without that field is reported by its file
(`source`) when it is a text file (one document per file), otherwise by its internal id. A text file
byte-identical to another input is read once and reported as removed for that file's document. A document
removed for a document of an earlier run (--against) has "cluster_in_earlier_run": true and the earlier
document's internal id as its cluster.
Input records that cannot be read are quarantined by the reader: stderr gives their count per kind and the
first one's place and reason."""
from __future__ import annotations

import argparse
import functools
import glob
import json
import os
import shutil
import sys
import tempfile
import time

from beamio.config_base import ConfigError, InputConfig, load_section
from beamio.read import Quarantined, iter_records, reported_id, resolve_inputs
from cli import positive_int
from cli.analysis import (TextTwins, check_new_folder, check_out_path, no_document_exit_code, quarantine_summary,
                          resolve_input_fields, run_config_for)
from runio.files import atomic_output
from runio.heap import numpy_friendly_heap
from transforms.base import step_annotations
from transforms.near_dedup.core import (NearDedupConfig, SKETCH_BATCH, SketchBuilder, check_unique_ids, chosen_path,
                                        dedup_in_memory)

SECTION = "near_dedup"


def register(subparsers) -> None:
    p = subparsers.add_parser("dedup", help="near-duplicate clusters of a corpus (the pipeline's near_dedup stage)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", nargs="+", help="files, folders or globs (local paths or Beam FileSystems URIs)")
    p.add_argument("--out", required=True, help="output JSONL: one {id, cluster, kept} line per document")
    p.add_argument("--id-field", help="input field reported as the id (default: --config's input.id_field, else id; "
                                      "documents without it are reported by their file if it is a text file, "
                                      "otherwise by their internal id)")
    p.add_argument("--text-field", help="input field holding the text (default: --config's input.text_field, else "
                                        "text)")
    p.add_argument("--config", help="run config YAML, checked as `prepare` checks it; its `near_dedup` section is "
                                    "used (default: built-in defaults)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="near_dedup.KEY=VALUE",
                   help="override a near_dedup setting (`dedup.KEY=VALUE` is accepted too); repeatable")
    p.add_argument("--index-out", help="also write the index of kept documents here (for a later --against)")
    p.add_argument("--against", action="append", default=[], metavar="INDEX_DIR",
                   help="an earlier run's dedup/ index: its documents win; repeatable")
    p.add_argument("--runner", default="direct",
                   help="direct (default) | inprocess | dask | flink | spark | dataflow")
    p.add_argument("--workers", type=positive_int, help="local workers (default: one per core; with --runner dask "
                                                          "and no --dask-address, the LocalCluster's worker processes)")
    p.add_argument("--dask-address", help="with --runner dask: the scheduler, tcp://host:8786 (default: a "
                                          "LocalCluster started and stopped by the command)")
    p.add_argument("--worker-memory", help="with --runner dask and no --dask-address: each LocalCluster worker's "
                                           "memory limit (e.g. 2GiB), above 70%% of which Dask spills to disk")
    p.set_defaults(handler=_run, accepts_beam_args=True)


def _report_id(doc: dict, id_field: str):
    """Its ``id_field``, a text file's name, else the internal id (``beamio.read.reported_id``)."""
    return reported_id(doc, id_field, default=doc["id"])


def _what_a_line_needs(doc: dict, id_field: str) -> dict:
    """A document as far as its output line needs it: its id, the reported id, and its annotations (no text)."""
    return {"id": doc["id"], "meta": {id_field: _report_id(doc, id_field)},
            "annotations": doc.get("annotations") or {}}


def _kept_line_or_head(doc: dict, id_field: str):
    """A kept document's line; one that others were removed for (``cluster_size``) goes to ``heads`` instead, for
    the join that gives their lines its reported id (most documents are in no cluster and join nothing)."""
    user_id = _report_id(doc, id_field)
    if step_annotations(doc.get("annotations"), SECTION).get("cluster_size"):
        import apache_beam as beam

        yield beam.pvalue.TaggedOutput("heads", (doc["id"], user_id))
    else:
        yield json.dumps({"id": user_id, "cluster": user_id, "kept": True}, ensure_ascii=False)


def _removed_for_the_same_document(row: dict, name: str) -> dict:
    """A copied text file's line (``TextTwins``): removed, in the cluster of the file it copies (that file, or the
    document it is removed for, is the one kept)."""
    return {"id": name, "cluster": row["cluster"], "kept": False}


# ------------------------------------------------------------------------------------ the dedup command


def _start_local_cluster(workers: int | None, worker_memory: str | None) -> None:
    """The LocalCluster starts (its workers importing Beam) while this process imports Beam and builds the graph.
    Without the dask extra nothing starts here: building the pipeline then says what is missing."""
    try:
        # deferred: dask.distributed is an optional extra
        from beam_dask.cluster import start_shared_local_cluster
    except ImportError:
        return
    start_shared_local_cluster(workers, worker_memory)


def _has_option(beam_args, name: str) -> bool:
    return any(arg == name or arg.startswith(name + "=") for arg in beam_args)


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


def _local_runner(dedup, args) -> tuple[str, int | None]:
    """The in-memory near-dedup path gathers every sketch on one worker: on the local runner, unless --workers
    is given, it runs in this process (worker processes would add only their start-up and the transfer of every
    document to them)."""
    if args.runner == "direct" and args.workers is None and dedup.cfg.enabled and dedup.path() == "memory":
        return "inprocess", 1
    return args.runner, args.workers


def _components_where(dedup, counters: dict) -> str:
    """Where the path found the components: the size of the Beam path's last, single-worker label merge is
    ``cc_max_rounds``' trade-off."""
    path = dedup.path()
    if path == "memory":
        return "components on one worker, the in-memory path"
    if path == "beam" and dedup.components_on_one_worker():
        return "components on one worker: a small input (near_dedup.cc_one_worker_max_input_bytes)"
    return (f"{counters.get('cc_crossing_edges', 0)} label pairs in the last component merge after "
            f"{dedup.cfg.cc_max_rounds} star rounds")


def _runs_without_beam(cfg, input_bytes: int, args) -> bool:
    """The in-memory path on the local runner, without earlier runs' indexes or an index to write: the pure core
    runs in this process on a stream of records (Beam is not even imported; only the sketches are kept).
    ``--runner inprocess`` (or any other runner, ``--workers`` or Beam options) runs the same decisions on Beam."""
    return (args.runner == "direct" and args.workers is None and cfg.enabled
            and chosen_path(cfg, input_bytes) == "memory"
            and not args.index_out and not args.against and not args.beam_args)


def _dedup_without_beam(cfg, input_cfg, files, out_path: str, id_field: str,
                        twins: TextTwins) -> tuple[int, int, list[dict]]:
    """Read, sketch in batches, ``dedup_in_memory``, write one line per document in input order. Returns
    (documents, kept, quarantine records)."""
    numpy_friendly_heap(keep_free_top=True)  # this process does nothing else: the sketching stays on the heap
    builder = SketchBuilder(cfg)
    internal_ids: list[int] = []
    reported: dict[int, object] = {}
    sketches, batch = [], []
    quarantined: list[dict] = []

    def flush():
        sketches.extend(s for s in builder.sketch_batch(batch) if s is not None)
        batch.clear()

    for _, _, item in iter_records(input_cfg, files):
        if isinstance(item, Quarantined):
            quarantined.append(item.as_record())
            continue
        internal_ids.append(item["id"])
        reported[item["id"]] = _report_id(item, id_field)
        batch.append(item)
        if len(batch) >= SKETCH_BATCH:
            flush()
    if batch:
        flush()
    check_unique_ids(internal_ids)
    removed_for = {d.id: d.cluster for d in dedup_in_memory(sketches, cfg) if d.removed}
    n_docs = n_kept = 0
    with atomic_output(out_path, "w") as out:
        for doc_id in internal_ids:
            user_id = reported[doc_id]
            cluster = removed_for.get(doc_id)
            row = ({"id": user_id, "cluster": user_id, "kept": True} if cluster is None
                   else {"id": user_id, "cluster": reported[cluster], "kept": False})
            for line in (row, *twins.rows(row)):
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
                n_docs += 1
                n_kept += line["kept"]
    return n_docs, n_kept, quarantined + twins.quarantined(quarantined)


def _run(args) -> int:
    cfg = load_section(args.config, SECTION, NearDedupConfig, args.overrides, aliases=("dedup",))
    resolve_input_fields(args)
    input_cfg = InputConfig(paths=args.input, text_field=args.text_field, id_field=args.id_field)
    if args.config is not None:  # the rest of the file as prepare checks it (without a file: nothing to check)
        run_config_for("dedup", args.config, input_cfg, near_dedup=cfg)
    check_out_path(args.out)
    if args.index_out:
        check_new_folder(args.index_out, "--index-out", read_from=args.against)
    if (args.dask_address or args.worker_memory) and args.runner != "dask":
        option = "--dask-address" if args.dask_address else "--worker-memory"
        raise ConfigError(f"{option} needs --runner dask (got --runner {args.runner})")
    if args.dask_address and args.worker_memory:
        raise ConfigError("--worker-memory limits the workers of a LocalCluster the command starts; a cluster at "
                          "--dask-address has its own (dask worker --memory-limit)")
    if args.worker_memory:  # the same rule as a run config's runner.worker_memory
        from pydantic import ValidationError

        # deferred: the run config imports Beam, which the in-memory path runs without
        from pipelines.config import RunnerConfig
        try:
            RunnerConfig(name="dask", worker_memory=args.worker_memory)
        except ValidationError:
            raise ConfigError(f"--worker-memory {args.worker_memory!r}: expected a size such as 2GiB or "
                              f"1500MB") from None
    # raises ConfigError naming a path that matches nothing; a byte-identical second file is read once
    twins = TextTwins(_removed_for_the_same_document)
    files = resolve_inputs(input_cfg.paths, log=lambda line: print(f"corpusmill dedup: {line}", file=sys.stderr),
                           on_twin=twins.add)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    id_field = args.id_field
    started = time.perf_counter()
    input_bytes = sum(f.bytes for f in files)
    if _runs_without_beam(cfg, input_bytes, args):
        n_docs, n_kept, quarantined = _dedup_without_beam(cfg, input_cfg, files, args.out, id_field, twins)
        elapsed = time.perf_counter() - started
        print(f"corpusmill dedup: {n_docs} documents, {n_kept} kept, {n_docs - n_kept} removed as near-duplicates, "
              f"{quarantine_summary(quarantined)}; {elapsed:.1f} s ({n_docs / max(elapsed, 1e-9):.0f} docs/s, "
              f"in-memory path in this process) → {args.out}", file=sys.stderr)
        return no_document_exit_code("dedup", "to deduplicate", n_docs, quarantined, args.text_field)

    if args.runner == "dask" and not args.dask_address:
        _start_local_cluster(args.workers, args.worker_memory)
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter

    # deferred, as Beam above: only this path builds a pipeline (the in-memory path never imports Beam)
    from beamio.beam_options import make_pipeline
    from beamio.read_beam import ReadCorpus  # deferred: Beam
    from pipelines.runners import shuffle_workers  # deferred: Beam
    from transforms.near_dedup.beam import NearDedup  # deferred: Beam

    work = tempfile.mkdtemp(prefix=".dedup-", dir=out_dir)
    try:
        try:
            dedup = NearDedup(cfg, index_out_dir=args.index_out, against_dirs=args.against,
                              input_bytes=input_bytes, carry=functools.partial(_what_a_line_needs, id_field=id_field))
        except (FileNotFoundError, ValueError) as err:
            raise ConfigError(str(err)) from None
        runner, workers = _local_runner(dedup, args)  # (the path, hence the runner, counts the --against indexes)
        dedup.workers = shuffle_workers(runner, workers, args.dask_address)  # its partitions: as many per worker
        parts = dedup.partitions()
        # On Dask every shuffle of this command has near-dedup's partition count (one per 64 MB of input, as many
        # for each worker): its blocks are a few elements per partition, and each shuffle costs the runner that
        # count squared in tasks
        pipeline = make_pipeline(runner, workers, args.beam_args, dask_address=args.dask_address,
                                 worker_memory=args.worker_memory, input_bytes=input_bytes,
                                 partitions=None if _has_option(args.beam_args, "--dask_partitions") else parts)
        # Many files per partition: each worker already reads a share, and the sketching fuses with the reading
        read = pipeline | "Read" >> ReadCorpus(input_cfg, files, spread_documents=len(files) < 2 * parts)
        result = read["docs"] | "NearDedup" >> dedup
        kept = result["kept"] | "KeptIds" >> beam.FlatMap(_kept_line_or_head, id_field).with_outputs(
            "heads", main="lines")
        removed = result["removed"] | "RemovedIds" >> beam.Map(
            lambda d: (step_annotations(d["annotations"], SECTION)["cluster"], _report_id(d, id_field)))
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
        with atomic_output(args.out, "w") as out:
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
    elapsed = time.perf_counter() - started
    counters: dict[str, int] = {}
    for r in outcome.metrics().query(MetricsFilter().with_namespace("near_dedup"))["counters"]:
        counters[r.key.metric.name] = counters.get(r.key.metric.name, 0) + (r.committed or 0)  # summed over steps
    print(f"corpusmill dedup: {n_docs} documents, {n_kept} kept, {n_docs - n_kept} removed as near-duplicates, "
          f"{quarantine_summary(quarantined)}; {elapsed:.1f} s ({n_docs / max(elapsed, 1e-9):.0f} docs/s; "
          f"near_dedup's own code busy {counters.get('busy_ms', 0) / 1000:.1f} s, summed over workers; "
          f"{_components_where(dedup, counters)}) → {args.out}", file=sys.stderr)
    return no_document_exit_code("dedup", "to deduplicate", n_docs, quarantined, args.text_field)

