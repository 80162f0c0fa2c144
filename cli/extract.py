"""`corpusmill extract INPUT --html-field html --out OUT.jsonl`: the main text of HTML held in a record field.

Parse, call ``pipelines.extract.write_extracted`` (the pipeline's own extractor, the run config's ``extract``
section), print the summary line: what this writes is what a run keeps, and extraction can be scored on its own.
Each output line, one per input record and in input order: {"id", "text"}; a record whose page has no usable main
text gets "text": "" and a "reason" (no_main_text, too_short_after_extraction, html_too_large); a record the reader
cannot read (no such field, not a string, empty, invalid JSON) gets "id": null, "text": "", the "reason" (the
reader's kind) and its "source" and "position" (JSONL line from 1). A record without the id field gets "id": null
with its "source" and "position". Nothing is dropped: the summary line counts every kind. Input: what a run reads
(JSONL, optionally .gz/.zst, or Parquet), through the pipeline's reader.
"""
from __future__ import annotations

import argparse
import sys

from beamio.config_base import InputConfig, load_section
from cli.analysis import check_out_path, resolve_input_fields, run_config_for
from runio.errors import ExitCode
from transforms.extract.config import ExtractConfig
from transforms.extract.step import check

SECTION = "extract"


def register(subparsers) -> None:
    p = subparsers.add_parser("extract", help="main text of the HTML in a record field; write {id, text} per record",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="a file, folder or glob: JSONL (.gz/.zst) or Parquet")
    p.add_argument("--html-field", default=None, help="record field holding the HTML (default: --config's "
                                                      "extract.html_field, else html)")
    p.add_argument("--out", required=True, help="output JSONL path")
    p.add_argument("--id-field", help="record field holding the document id (default: --config's input.id_field, "
                                      "else id)")
    p.add_argument("--config", help="run config YAML; its `extract` section is used (default: built-in defaults)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="extract.KEY=VALUE",
                   help="override a setting of the extract section (repeatable)")
    p.set_defaults(handler=_run)


def _run(args) -> int:
    cfg = load_section(args.config, SECTION, ExtractConfig, args.overrides)
    html_field = args.html_field or cfg.html_field or "html"
    args.text_field = html_field  # the reader's text is the page
    resolve_input_fields(args)
    args.text_field = html_field
    input_cfg = InputConfig(paths=[args.input], text_field=html_field, id_field=args.id_field)
    if args.config is not None:  # the rest of the file as prepare checks it: a misspelt section is an error
        run_config_for("extract", args.config, input_cfg, extract=cfg)
    check(cfg.model_copy(update={"html_field": html_field}))  # the extractor's library must import (exit 2)
    check_out_path(args.out)
    say = lambda line: print(f"corpusmill extract: {line}", file=sys.stderr)  # noqa: E731
    from pipelines.extract import write_extracted  # deferred: Resiliparse (the optional `web` extra), checked above

    done = write_extracted(input_cfg, cfg, args.out, say)
    why = ", ".join(f"{k} {v}" for k, v in sorted(done.reasons.items()))
    tail = f"; without {args.id_field!r}: {done.without_id}" if done.without_id else ""
    speed = (f", {done.html_bytes / 1e6 / done.cpu_s:.1f} MB of HTML per CPU-s"
             if done.cpu_s > 0 and done.html_bytes else "")
    say(f"{done.written} records: {done.extracted} with main text, {done.written - done.extracted} without"
        f"{f' ({why})' if why else ''}{tail}; extractor {cfg.extractor}; {done.wall_s:.1f}s{speed}; wrote {args.out}")
    return ExitCode.OK
