"""The `corpusmill extract` command's work as a library function: the main text of the HTML in a record field,
one ``{"id", "text"}`` line per input record, in input order, nothing dropped.

The pipeline's own extractor runs (``transforms.extract.core.extract`` with the run config's ``extract`` section),
so what this writes is what a run keeps. A record whose page has no usable main text gets ``"text": ""`` and a
``reason``; a record the reader cannot read gets ``"id": null``, the reader's kind as its reason, and its
``source`` and ``position`` (JSONL line from 1); so does a record without the id field.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from beamio.config_base import InputConfig
from beamio.read import Quarantined, iter_records, record_position, reported_id, resolve_inputs
from runio.files import atomic_output
from transforms.extract.config import ExtractConfig
from transforms.extract.core import extract


@dataclass
class ExtractSummary:
    """What the summary line says: records written, how many had main text, why the others had none."""

    written: int = 0
    extracted: int = 0
    without_id: int = 0
    html_bytes: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    reasons: Counter = field(default_factory=Counter)


def _unreadable_row(item: Quarantined) -> tuple[dict, str]:
    kind = "missing_html_field" if item.kind == "missing_text" else item.kind
    return {"id": None, "text": "", "reason": kind, "source": item.source, "position": item.position}, kind


def write_extracted(input_cfg: InputConfig, cfg: ExtractConfig, out_path: str,
                    say: Callable[[str], None]) -> ExtractSummary:
    """Extract every record of ``input_cfg`` (its ``text_field`` holds the HTML) into ``out_path``, atomically."""
    done = ExtractSummary()
    files = resolve_inputs(input_cfg.paths, log=say)
    started, cpu_started = time.perf_counter(), time.process_time()
    with atomic_output(out_path, "w") as out:
        for source, index, item in iter_records(input_cfg, files):
            if isinstance(item, Quarantined):
                row, kind = _unreadable_row(item)
                say(f"record {item.position} of {source}: {kind}: {item.reason}")
                done.reasons[kind] += 1
            else:
                html = item["text"]
                done.html_bytes += len(html)
                result = extract(html, cfg)
                doc_id = reported_id(item, input_cfg.id_field)
                row = {"id": doc_id, "text": result.text if result.reason is None else ""}
                if result.reason is not None:
                    row["reason"] = result.reason
                    done.reasons[result.reason] += 1
                else:
                    done.extracted += 1
                if doc_id is None:
                    done.without_id += 1
                    row.update(source=item["source"], position=record_position(source, index, input_cfg))
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            done.written += 1
    done.wall_s, done.cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    return done
