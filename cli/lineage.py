"""`corpusmill trace RUN`: which documents a run holds, where they went, which steps and checkpoints saw them."""
from __future__ import annotations

import argparse
import json
import sys

from runio.errors import ExitCode


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "trace", help="where documents came from, what the clean did, the shard rows, training steps and "
                      "checkpoints that saw them")
    parser.add_argument("run_dir", help="a run directory (runs/<name>)")
    parser.add_argument("--id", dest="ids", action="append", default=[], metavar="ID",
                        help="the input's own id (input.id_field, else the field `id`); repeatable")
    parser.add_argument("--ids-file", metavar="FILE", help="input ids, one per line")
    parser.add_argument("--source", dest="sources", action="append", default=[], metavar="FILE[:LINE]",
                        help="an input file (every document of it) or one record (JSONL line from 1, Parquet row "
                             "from 0); repeatable")
    parser.add_argument("--match", metavar="REGEX", help="a regular expression over the kept documents' text")
    parser.add_argument("--doc-id", dest="doc_ids", action="append", default=[], type=int, metavar="N",
                        help="a corpusmill document id (docs/, removed/, the shards' doc_ids); repeatable")
    parser.add_argument("--inputs", action="store_true",
                        help="also read the run's input files again (checked against their sha256) to find removed "
                             "documents by --id or --match: removed/ stores neither input ids nor text")
    parser.add_argument("--json", action="store_true", help="one JSON object per document per line")
    parser.set_defaults(handler=_trace)


def _trace(args: argparse.Namespace) -> int:
    # deferred: lineage reads checkpoints and the sampler through trainer_bridge, which imports torch; registering
    # the command (every `corpusmill` call) must not
    from lineage.trace import TraceQuery, describe, read_ids_file, trace

    ids = list(args.ids) + (read_ids_file(args.ids_file) if args.ids_file else [])
    results = trace(args.run_dir, TraceQuery(ids=ids, sources=args.sources, match=args.match, doc_ids=args.doc_ids,
                                                 inputs=args.inputs))
    for record in results:
        print(json.dumps(record, ensure_ascii=False, default=str) if args.json else describe(record))
    missing = sum(r["fate"] == "not_found" for r in results)
    if missing and not args.json:
        print(f"corpusmill trace: {missing} of {len(results)} not found", file=sys.stderr)
    return ExitCode.OK
