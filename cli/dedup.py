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
import sys

from beamio.config_base import ConfigError, InputConfig, load_section
from cli import positive_int
from cli.analysis import (check_new_folder, check_out_path, no_document_exit_code, quarantine_summary,
                          resolve_input_fields, run_config_for)

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


def _check_cluster_options(args) -> None:
    """The Dask options make sense only together with ``--runner dask``, and a memory limit only for a cluster the
    command starts itself."""
    if (args.dask_address or args.worker_memory) and args.runner != "dask":
        option = "--dask-address" if args.dask_address else "--worker-memory"
        raise ConfigError(f"{option} needs --runner dask (got --runner {args.runner})")
    if args.dask_address and args.worker_memory:
        raise ConfigError("--worker-memory limits the workers of a LocalCluster the command starts; a cluster at "
                          "--dask-address has its own (dask worker --memory-limit)")
    if args.worker_memory:  # the same rule as a run config's runner.worker_memory
        from pydantic import ValidationError

        from pipelines.config import RunnerConfig  # deferred: the run config imports every step's (numpy)
        try:
            RunnerConfig(name="dask", worker_memory=args.worker_memory)
        except ValidationError:
            raise ConfigError(f"--worker-memory {args.worker_memory!r}: expected a size such as 2GiB or "
                              f"1500MB") from None


def _run(args) -> int:
    # deferred like every command's work: registering the command (on every `corpusmill` call) imports no numpy,
    # pydantic or reader
    from pipelines.dedup import Execution, write_clusters  # deferred: numpy and the readers, as said above
    from transforms.near_dedup.core import NearDedupConfig  # deferred: numpy

    cfg = load_section(args.config, SECTION, NearDedupConfig, args.overrides, aliases=("dedup",))
    resolve_input_fields(args)
    input_cfg = InputConfig(paths=args.input, text_field=args.text_field, id_field=args.id_field)
    if args.config is not None:  # the rest of the file as prepare checks it (without a file: nothing to check)
        run_config_for("dedup", args.config, input_cfg, near_dedup=cfg)
    check_out_path(args.out)
    if args.index_out:
        check_new_folder(args.index_out, "--index-out", read_from=args.against)
    _check_cluster_options(args)
    done = write_clusters(
        cfg, input_cfg, args.out, index_out=args.index_out, against=args.against,
        execution=Execution(args.runner, args.workers, args.dask_address, args.worker_memory, tuple(args.beam_args)),
        log=lambda line: print(f"corpusmill dedup: {line}", file=sys.stderr))
    n_docs, elapsed = done.documents, done.seconds
    where = (", in-memory path in this process" if done.in_this_process else
             f"; near_dedup's own code busy {done.busy_seconds:.1f} s, summed over workers; {done.components}")
    print(f"corpusmill dedup: {n_docs} documents, {done.kept} kept, {n_docs - done.kept} removed as "
          f"near-duplicates, {quarantine_summary(done.quarantined)}; {elapsed:.1f} s "
          f"({n_docs / max(elapsed, 1e-9):.0f} docs/s{where}) → {args.out}", file=sys.stderr)
    return no_document_exit_code("dedup", "to deduplicate", n_docs, done.quarantined, args.text_field)
