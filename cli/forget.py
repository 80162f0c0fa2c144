"""`corpusmill forget RUN --ids-file FILE --reason TEXT [--duplicates]`: take documents out of a run for good.

Thin: parse, call ``lineage.forget.forget``, print. What it does (ledger, docs/ → removed/, shards rebuilt, the
trainer's refusal to resume on them) is in lineage/forget.py and docs/compliance.md. Exit 0 done; 2 an id that
matches no document, an empty reason or ids file, or not a cleaned run (nothing written); 4 a damaged ledger.
"""
from __future__ import annotations

import argparse

from lineage.forget import forget, read_ids_file
from runio.errors import ExitCode


def _forget(args: argparse.Namespace) -> int:
    ids = read_ids_file(args.ids_file)
    result = forget(args.run_dir, ids, args.reason, duplicates=args.duplicates,
                    log=lambda line: print(f"corpusmill {line}", flush=True))
    said = [f"{result.removed_from_docs} documents moved from docs/ to removed/ (reason takedown)"]
    if result.duplicates:
        said.append(f"{result.duplicates} duplicates of them too")
    if result.already_removed:
        said.append(f"{len(result.already_removed)} the clean had already removed (ledgered, so they stay out)")
    print(f"corpusmill forget: done: {'; '.join(said)}; ledger {result.ledger}")
    if result.checkpoints:
        print(f"corpusmill forget: train/ holds checkpoints trained on them ({', '.join(result.checkpoints)}): "
              f"training will not resume on the rebuilt shards; `corpusmill train CONFIG --from-scratch` trains "
              f"anew on the documents that remain (the checkpoints are set aside, not deleted)")
    return ExitCode.OK


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "forget", help="remove documents from a run for good: ledger, docs/ → removed/, shards rebuilt; later "
                       "cleans drop them when they come back")
    parser.add_argument("run_dir", help="the run directory (runs/<name>) whose documents are forgotten")
    parser.add_argument("--ids-file", required=True,
                        help="one id per line: a corpusmill document id or an input id (input.id_field, a text "
                             "file's name); # comments and blank lines are skipped")
    parser.add_argument("--reason", required=True, help="why (kept in the ledger: a request, a withdrawn licence)")
    parser.add_argument("--duplicates", action="store_true",
                        help="also forget the exact and near duplicates of them still in docs/ (exact dedup's key; "
                             "MinHash at near_dedup.threshold)")
    parser.set_defaults(handler=_forget)
