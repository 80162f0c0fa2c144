"""`corpusmill pii INPUT --out SPANS.jsonl`: PII spans and masked text per document, for audits and evaluation.

Runs the pipeline's own step (``transforms.pii.PiiStep``) in batches, so what this prints is what a run masks.
Each output line: {"id", "spans": [{"start", "end", "entity_type", "score"}], "masked_text"}; offsets are Python
string offsets into the ORIGINAL text. Input: what a run reads (JSONL, optionally .gz/.zst, Parquet, folders of
.txt), through the pipeline's reader; a record it quarantines is skipped, with its position and the reason. A
text file byte-identical to another input is read once and gets the line of the file it copies, under its own name.
When every record read is skipped (most often a text or id field under another name) the command says which
option to check and exits 1.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

from beamio.read import Quarantined, iter_records, record_position, reported_id, resolve_inputs
from cli import positive_int
from cli.analysis import (MISSING_ID, check_out_path, no_document_exit_code, resolve_input_fields,
                          run_config_for)
from pipelines.config import ConfigError, InputConfig, load_section
from pipelines.twins import TextTwins
from runio.files import atomic_output
from transforms.pii import PiiConfig, PiiStep
from transforms.pii import step as pii_step

SECTION = "pii"


def register(subparsers) -> None:
    p = subparsers.add_parser("pii", help="detect and mask PII; write spans + masked text per document",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="a file, folder or glob: JSONL (.gz/.zst), Parquet or .txt files")
    p.add_argument("--out", required=True, help="output JSONL path")
    p.add_argument("--id-field", help="record field holding the document id (default: --config's input.id_field, "
                                      "else id; a text file is reported by its name, a record without it is skipped)")
    p.add_argument("--text-field", help="record field holding the text (default: --config's input.text_field, else "
                                        "text)")
    p.add_argument("--config", help="run config YAML, checked as `prepare` checks it; its `pii` section is used "
                                    "(default: built-in defaults)")
    p.add_argument("--ner", choices=["auto", "on", "off"], help="override pii.ner")
    p.add_argument("--operator", choices=["replace", "mask", "hash", "redact"], help="override pii.operator")
    p.add_argument("--hash-salt-env", metavar="VAR",
                   help="take pii.hash_salt from this environment variable (keeps the salt off the command line)")
    p.add_argument("--batch-size", type=positive_int, default=256, help="documents per call of the step "
                                                                         "(default: 256)")
    p.set_defaults(handler=_run)


def _settings(args) -> dict:
    """The command's own flags, as typed values of the pii section (applied over --config)."""
    values = {key: getattr(args, key) for key in ("ner", "operator") if getattr(args, key)}
    if args.hash_salt_env:
        if args.hash_salt_env not in os.environ:
            raise ConfigError(f"--hash-salt-env: environment variable {args.hash_salt_env} is not set")
        values["hash_salt"] = os.environ[args.hash_salt_env]
    return values


def _run(args) -> int:
    cfg = load_section(args.config, SECTION, PiiConfig, values=_settings(args))
    resolve_input_fields(args)
    input_cfg = InputConfig(paths=[args.input], text_field=args.text_field, id_field=args.id_field)
    if args.config is not None:  # the rest of the file as prepare checks it: a misspelt section is an error
        run_config_for("pii", args.config, input_cfg, pii=cfg)
    pii_step.check(cfg)  # the run's build-time check: a required NER model that is missing is a config error (exit 2)
    check_out_path(args.out)
    say = lambda line: print(f"corpusmill pii: {line}", file=sys.stderr)  # noqa: E731
    # raises ConfigError naming a path that matches nothing; a byte-identical second file is read once, and a
    # text file's copy gets its line
    twins = TextTwins()
    files = resolve_inputs(input_cfg.paths, log=say, on_twin=twins.add)

    step = PiiStep(cfg)
    step.setup()
    say(f"engine {step.ner_engine}")
    counts: Counter = Counter()
    docs = 0
    skipped: list[dict] = []  # quarantine records, and MISSING_ID ones: place and reason only (they may hold PII)
    started = time.perf_counter()
    with atomic_output(args.out, "w") as out:
        batch: list[dict] = []

        def flush():
            nonlocal docs
            results, _ = step.process(batch)
            for doc, res in zip(batch, results):
                row = {"id": doc["id"], "spans": [s.to_dict() for s in res.spans], "masked_text": res.masked_text}
                for line in (row, *twins.rows(row)):
                    counts.update(s.entity_type for s in res.spans)
                    out.write(json.dumps(line, ensure_ascii=False) + "\n")
                    docs += 1
            batch.clear()

        for source, index, item in iter_records(input_cfg, files):
            if isinstance(item, Quarantined):
                record = item.as_record()
                copies = twins.quarantined([record])  # a text file's copies are quarantined as it is
                for where, reason in ((source, item.reason), *((c["source"], c["reason"]) for c in copies)):
                    say(f"skipped record {item.position} of {where}: {reason}")
                skipped += [record, *copies]
                continue
            # a text file without the field is reported by its name (reported_id); a record without it is skipped
            doc_id = reported_id(item, args.id_field)
            if doc_id is None:
                position = record_position(source, index, input_cfg)
                say(f"skipped record {position} of {source}: no field {args.id_field!r}")
                skipped.append({"kind": MISSING_ID, "source": item["source"], "position": position})
                continue
            batch.append({"id": doc_id, "text": item["text"], "annotations": {}})
            if len(batch) >= args.batch_size:
                flush()
        if batch:
            flush()
    elapsed = time.perf_counter() - started
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
    say(f"{docs} documents ({len(skipped)} skipped) in {elapsed:.1f}s; spans: {summary}; wrote {args.out}")
    return no_document_exit_code("pii", "to scan", docs, skipped, args.text_field, args.id_field,
                                 set_aside_as="skipped")
