"""`corpusmill pii INPUT --out SPANS.jsonl`: PII spans and masked text per document, for audits and evaluation.

Runs the pipeline's own step (``transforms.pii.PiiStep``) in batches, so what this prints is what a run masks.
Each output line: {"id", "spans": [{"start", "end", "entity_type", "score"}], "masked_text"}; offsets are Python
string offsets into the ORIGINAL text. Input: JSONL (optionally .gz/.zst) or Parquet, one document per record.
"""
from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import sys
import time
from collections import Counter
from typing import Iterator


def register(subparsers) -> None:
    p = subparsers.add_parser("pii", help="detect and mask PII; write spans + masked text per document",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="JSONL / JSONL.gz / JSONL.zst / Parquet file")
    p.add_argument("--out", required=True, help="output JSONL path")
    p.add_argument("--id-field", default="id", help="record field holding the document id (default: id)")
    p.add_argument("--text-field", default="text", help="record field holding the text (default: text)")
    p.add_argument("--config", help="run config YAML; its `pii` section is used (default: built-in defaults)")
    p.add_argument("--ner", choices=["auto", "on", "off"], help="override pii.ner")
    p.add_argument("--operator", choices=["replace", "mask", "hash", "redact"], help="override pii.operator")
    p.add_argument("--hash-salt-env", metavar="VAR",
                   help="take pii.hash_salt from this environment variable (keeps the salt off the command line)")
    p.add_argument("--batch-size", type=int, default=256)
    p.set_defaults(handler=_run)


def _records(path: str, id_field: str, text_field: str) -> Iterator[tuple[int, object, str | None, str | None]]:
    """(position, id, text, problem) per input record; a record that cannot be used has a problem, no text."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        for pos, rec in enumerate(table.to_pylist()):
            yield _check(pos, rec, id_field, text_field)
        return
    if path.endswith(".gz"):
        fh = gzip.open(path, "rt", encoding="utf-8", errors="strict")
    elif path.endswith(".zst"):
        import zstandard

        fh = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(open(path, "rb")), encoding="utf-8")
    else:
        fh = open(path, encoding="utf-8")
    with fh:
        pos = 0
        while True:
            try:
                line = fh.readline()
            except UnicodeDecodeError:
                yield pos, None, None, "not valid UTF-8"
                return
            if not line:
                return
            if line.strip():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as err:
                    yield pos, None, None, f"invalid JSON ({err.msg} at column {err.colno})"
                else:
                    yield _check(pos, rec, id_field, text_field)
            pos += 1


def _check(pos: int, rec, id_field: str, text_field: str):
    if not isinstance(rec, dict):
        return pos, None, None, "record is not a JSON object"
    if id_field not in rec:
        return pos, None, None, f"no field {id_field!r}"
    text = rec.get(text_field)
    if not isinstance(text, str):
        return pos, rec[id_field], None, f"field {text_field!r} missing or not a string"
    return pos, rec[id_field], text, None


def _run(args) -> int:
    from pipelines.config import ConfigError
    from transforms.pii import PiiConfig, PiiStep

    if not os.path.exists(args.input):
        raise ConfigError(f"input not found: {args.input}")
    section: dict = {}
    if args.config:
        import yaml

        with open(args.config, encoding="utf-8") as fh:
            section = dict((yaml.safe_load(fh) or {}).get("pii") or {})
    if args.ner:
        section["ner"] = args.ner
    if args.operator:
        section["operator"] = args.operator
    if args.hash_salt_env:
        if args.hash_salt_env not in os.environ:
            raise ConfigError(f"--hash-salt-env: environment variable {args.hash_salt_env} is not set")
        section["hash_salt"] = os.environ[args.hash_salt_env]
    try:
        cfg = PiiConfig(**section)
    except Exception as err:  # pydantic's message names the field and the allowed values
        raise ConfigError(f"pii config: {err}") from None

    step = PiiStep(cfg)
    step.setup()
    print(f"corpusmill pii: engine {step.ner_engine}", file=sys.stderr)
    tmp = args.out + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    counts: Counter = Counter()
    docs = skipped = 0
    started = time.perf_counter()
    with open(tmp, "w", encoding="utf-8") as out:
        batch: list[dict] = []

        def flush():
            results, _ = step.process(batch)
            for doc, res in zip(batch, results):
                counts.update(s.entity_type for s in res.spans)
                out.write(json.dumps({"id": doc["id"], "spans": [s.to_dict() for s in res.spans],
                                      "masked_text": res.masked_text}, ensure_ascii=False) + "\n")
            batch.clear()

        for pos, doc_id, text, problem in _records(args.input, args.id_field, args.text_field):
            if problem:  # position and reason only: the record itself may hold PII
                skipped += 1
                print(f"corpusmill pii: skipped record {pos}: {problem}", file=sys.stderr)
                continue
            batch.append({"id": doc_id, "text": text, "annotations": {}})
            docs += 1
            if len(batch) >= args.batch_size:
                flush()
        if batch:
            flush()
    os.replace(tmp, args.out)
    elapsed = time.perf_counter() - started
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
    print(f"corpusmill pii: {docs} documents ({skipped} skipped) in {elapsed:.1f}s; spans: {summary}; "
          f"wrote {args.out}", file=sys.stderr)
    return 0 if docs or not skipped else 1
