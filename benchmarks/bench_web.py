"""End to end from a WARC: corpusmill's clean stage against datatrove's WarcReader → Trafilatura → filters, CPU
seconds per MB and wall, interleaved rounds (issue 45, item 6).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_web.py [--warc data/web/crawl.warc.gz] [--rounds 3]
        [--dt-python /tmp/dtvenv/bin/python] [--sides datatrove,corpusmill] [--json OUT.json]

The two sides, on the same WARC file, each in a fresh process, one worker each:

* **datatrove** (0.10.1): ``WarcReader`` → ``Trafilatura(favour_precision=True)`` → ``GopherRepetitionFilter`` →
  ``GopherQualityFilter`` → ``FineWebQualityFilter`` → ``JsonlWriter``, run by
  ``LocalPipelineExecutor(tasks=1, workers=1)``, all with their default settings (English). Its Trafilatura
  step extracts in a sandbox subprocess (a timeout per page): that process's CPU time counts (see below).
* **corpusmill**: the clean stage of ``corpusmill prepare configs/web.yaml`` (read, extract, normalize, the
  heuristic filters; written to Parquet), with ``--set`` turning off what datatrove's side does not do:
  ``url_filter.enabled=false exact_dedup.enabled=false near_dedup.enabled=false quality.enabled=false
  pii.enabled=false langid.enabled=false``, and ``filters.default={}`` (the Gopher and FineWeb default
  thresholds, which datatrove's filters use; web.yaml relaxes two of them for documentation pages), on
  ``runner.name=direct, runner.workers=1``. It runs the clean stage
  only (``pipelines.run.run_stages(cfg, ("clean",))``, the code ``prepare`` runs first): ``prepare`` would also
  train a tokenizer and write shards, which datatrove's pipeline does not do (``--with-shards`` runs the whole
  ``corpusmill prepare`` instead, and then the shards count). The normalize step always runs (NFC, whitespace).

Measured per run: wall seconds (``time.perf_counter`` around the subprocess) and CPU seconds of the whole process
tree (user + system of ``resource.getrusage(RUSAGE_CHILDREN)``, before and after: it adds every descendant that
was waited for, so a sandbox or Beam worker process counts once it has exited; each side's process also reports
its own tree's CPU time at exit, printed next to ours as a cross-check). Rounds are interleaved and alternate
the order (A B, B A, A B, ...), so a busy moment of a shared machine hits both sides alike. Reported: CPU s per
MB of WARC file (compressed, as it lies on disk) and per MB of HTML payload (the 2xx text/html response bodies),
the median over rounds of each side, and the median over rounds of the per-round ratio corpusmill/datatrove
(the bar: CPU per MB ≤ 0.2× datatrove's). Each side's documents in and out are printed so that it is plain
both did the work.

**The datatrove venv** (datatrove is not a corpusmill dependency; nothing here downloads models or data at run
time: datatrove's English word tokenizer is ``spacy.blank("en")``, which needs spaCy but no model)::

    python3 -m venv /tmp/dtvenv
    /tmp/dtvenv/bin/pip install datatrove==0.10.1 warcio trafilatura==2.3.1 lxml_html_clean nltk \\
        spacy==3.8.18 faust-cchardet python-magic

``faust-cchardet`` and ``python-magic`` (libmagic, ``libmagic1`` on Debian) are what ``WarcReader`` imports to
detect charsets and content types; ``trafilatura`` is pinned to the version corpusmill's ``web`` extra uses (its
``processing`` extra asks for <1.12; its ``Trafilatura`` step works with 2.3.1 unchanged). ``--dt-python``
names the venv's python (default: /tmp/dtvenv/bin/python).

This file is also the datatrove side's program (``--side-datatrove``) and the corpusmill side's
(``--side-corpusmill``): its top level imports only the standard library, so the datatrove venv runs it too.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MB = 1_000_000
OFF = ("url_filter.enabled=false", "exact_dedup.enabled=false", "near_dedup.enabled=false",
       "quality.enabled=false", "pii.enabled=false", "langid.enabled=false",
       "filters.default={}")  # the Gopher/FineWeb defaults, as datatrove's filters use (web.yaml relaxes two)


def _tree_cpu() -> float:
    """CPU seconds (user + system) of this process and every descendant it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _report_own_cpu(counts: dict) -> None:
    print("SIDE-RESULT " + json.dumps({"own_tree_cpu_s": round(_tree_cpu(), 3), **counts}), flush=True)


# ------------------------------------------------------------------------------------------ the datatrove side

def side_datatrove(warc: Path, out: Path) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter
    from datatrove.pipeline.readers import WarcReader
    from datatrove.pipeline.writers import JsonlWriter

    executor = LocalPipelineExecutor(
        pipeline=[
            WarcReader(str(warc.parent), glob_pattern=warc.name, recursive=False),
            Trafilatura(favour_precision=True),
            GopherRepetitionFilter(),
            GopherQualityFilter(),
            FineWebQualityFilter(),
            JsonlWriter(str(out / "output")),
        ],
        tasks=1, workers=1, logging_dir=str(out / "logs"))
    executor.run()
    stats = json.loads((out / "logs" / "stats.json").read_text())
    # per pipeline step: its name and its counters (documents in/forwarded/dropped)
    steps = []
    for step in stats:
        s = step.get("stats", {})
        total = s.get("total", (s.get("documents") or {}).get("total"))  # the reader counts "documents"
        forwarded = s.get("forwarded", None if total is None else total - s.get("dropped", 0))  # 0: no key
        steps.append({"name": step.get("name"), "total": total, "forwarded": forwarded,
                      # every plain counter: dropped_<rule> of the filters, the extractor's timeout/broken_process
                      "counters": {k: v for k, v in s.items() if isinstance(v, (int, float))
                                   and k not in ("total", "forwarded")}})
    written = sum(1 for p in (out / "output").glob("*.jsonl.gz") for _ in _gz_lines(p))
    _report_own_cpu({"side": "datatrove", "steps": steps, "written": written})


def _gz_lines(path: Path):
    import gzip

    with gzip.open(path, "rt", encoding="utf-8") as fh:
        yield from fh


# ----------------------------------------------------------------------------------------- the corpusmill side

def side_corpusmill(warc: Path, out: Path, config: Path, with_shards: bool, runner: str, workers: int,
                    check_extract: bool = True) -> None:
    sys.path.insert(0, str(REPO))
    from pipelines.config import load_config
    from pipelines.run import DATA_STAGES, run_stages
    from pipelines.steps import enabled_steps

    overrides = [f"input.paths=[{warc}]", f"output.runs_dir={out}", "name=bench_web",
                 f"runner.name={runner}", f"runner.workers={workers}", *OFF]
    cfg = load_config(config, overrides)
    if check_extract and "extract" not in enabled_steps(cfg):
        raise SystemExit("corpusmill: no `extract` step in this checkout (the WARC reader and the extract step of "
                         "issue 45 are not merged yet), so it cannot read a WARC: nothing to compare")
    run_stages(cfg, DATA_STAGES if with_shards else ("clean",), log=lambda _: None)
    stats = json.loads((out / "bench_web" / "stats.json").read_text())
    steps = [{"name": s["step"], "in": s["in"], "kept": s["kept"], "removed_by_reason": s["removed_by_reason"]}
             for s in stats["steps"]]
    _report_own_cpu({"side": "corpusmill", "read": stats["documents_read"], "kept": stats["kept"],
                     "quarantined": stats["quarantined"], "steps": steps,
                     "skipped": stats.get("skipped"), "balanced": stats["accounting"]["balanced"]})


# --------------------------------------------------------------------------------------------------- harness

def html_payload_bytes(warc: Path) -> tuple[int, int]:
    """(HTML response bodies' bytes, their count): the 2xx text/html responses, read with FastWARC."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    total = n = 0
    with open(warc, "rb") as fh:
        for record in ArchiveIterator(fh, parse_http=True, record_types=WarcRecordType.response):
            http = record.http_headers
            if http is None or not 200 <= http.status_code < 300:
                continue
            if "html" not in (http.get("Content-Type") or "").lower():
                continue
            total += len(record.reader.read())
            n += 1
    return total, n


def run_side(side: str, args, workdir: Path) -> dict:
    out = workdir / side
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if side == "datatrove":
        cmd = [args.dt_python, str(Path(__file__).resolve()), "--side-datatrove", "--warc", str(args.warc),
               "--out", str(out)]
    else:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--side-corpusmill", "--warc", str(args.warc),
               "--out", str(out), "--config", str(args.config), "--runner", args.runner,
               "--workers", str(args.workers)] + (["--with-shards"] if args.with_shards else []) \
            + (["--no-extract-check"] if args.no_extract_check else [])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cpu0, t0 = _tree_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _tree_cpu() - cpu0
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("SIDE-RESULT "):
            result = json.loads(line[len("SIDE-RESULT "):])
    if proc.returncode != 0 or result is None:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise SystemExit(f"{side} failed (exit {proc.returncode}):\n{tail}")
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warc", type=Path, default=REPO / "data" / "web" / "crawl.warc.gz")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dt-python", default="/tmp/dtvenv/bin/python",
                        help="python of a venv with datatrove (see the module docstring)")
    parser.add_argument("--sides", default="datatrove,corpusmill")
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "web.yaml")
    parser.add_argument("--runner", default="direct")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--with-shards", action="store_true", help="corpusmill: the whole `prepare` (clean + "
                                                                    "tokenizer + shards), not the clean stage only")
    parser.add_argument("--no-extract-check", action="store_true",
                        help="corpusmill: run without the extract step (to try the harness on text already "
                             "extracted, e.g. a JSONL given as --warc; the figures then compare nothing)")
    parser.add_argument("--json", type=Path, help="write every round's figures here")
    parser.add_argument("--workdir", type=Path, help="where the sides write (default: a temporary folder)")
    parser.add_argument("--side-datatrove", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--side-corpusmill", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.warc = args.warc.resolve()
    if args.side_datatrove:
        return side_datatrove(args.warc, args.out)
    if args.side_corpusmill:
        return side_corpusmill(args.warc, args.out, args.config, args.with_shards, args.runner, args.workers,
                               check_extract=not args.no_extract_check)

    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = set(sides) - {"datatrove", "corpusmill"}
    if unknown:
        raise SystemExit(f"--sides: unknown {sorted(unknown)}; expected datatrove and/or corpusmill")
    if "datatrove" in sides and not Path(args.dt_python).exists():
        raise SystemExit(f"--dt-python {args.dt_python} does not exist: create the venv (see this script's "
                         f"docstring)")
    warc_bytes = args.warc.stat().st_size
    html_bytes, pages = html_payload_bytes(args.warc) if ".warc" in args.warc.name else (warc_bytes, 0)
    print(f"WARC {args.warc}: {warc_bytes / MB:.2f} MB on disk, {pages} HTML responses, "
          f"{html_bytes / MB:.2f} MB of HTML; {args.rounds} interleaved rounds, one worker per side")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_web-"))
    rounds: list[dict] = []
    for r in range(args.rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        row = {}
        for side in order:
            res = run_side(side, args, workdir)
            row[side] = res
            print(f"round {r + 1} {side:<10} wall {res['wall_s']:7.2f} s  cpu {res['cpu_s']:7.2f} s "
                  f"(its own count {res['own_tree_cpu_s']:.2f})  cpu/MB warc {res['cpu_s'] / (warc_bytes / MB):.3f}  "
                  f"cpu/MB html {res['cpu_s'] / (html_bytes / MB):.3f}", flush=True)
        rounds.append(row)
    first = rounds[0]
    if "datatrove" in first:
        print("datatrove steps: " + "; ".join(f"{s['name']}: {s['total']} in, {s['forwarded']} out "
                                              f"{s['counters']}" for s in first["datatrove"]["steps"])
              + f"; written {first['datatrove']['written']}")
    if "corpusmill" in first:
        c = first["corpusmill"]
        print(f"corpusmill: read {c['read']}, kept {c['kept']}, quarantined {c['quarantined']}; steps: "
              + "; ".join(f"{s['name']}: {s['in']} in, {s['kept']} kept" for s in c["steps"]))
    summary = {"warc": str(args.warc), "warc_mb": round(warc_bytes / MB, 3), "html_mb": round(html_bytes / MB, 3),
               "html_pages": pages, "rounds": rounds}
    for side in sides:
        cpu = statistics.median(rw[side]["cpu_s"] for rw in rounds)
        wall = statistics.median(rw[side]["wall_s"] for rw in rounds)
        summary[side] = {"cpu_s": cpu, "wall_s": wall, "cpu_s_per_warc_mb": round(cpu / (warc_bytes / MB), 4),
                         "cpu_s_per_html_mb": round(cpu / (html_bytes / MB), 4)}
        print(f"{side:<10} median: cpu {cpu:.2f} s, wall {wall:.2f} s; {summary[side]['cpu_s_per_warc_mb']:.3f} "
              f"cpu-s/MB of WARC, {summary[side]['cpu_s_per_html_mb']:.3f} cpu-s/MB of HTML")
    if len(sides) == 2:
        cpu_ratio = statistics.median(rw["corpusmill"]["cpu_s"] / rw["datatrove"]["cpu_s"] for rw in rounds)
        wall_ratio = statistics.median(rw["corpusmill"]["wall_s"] / rw["datatrove"]["wall_s"] for rw in rounds)
        summary["ratio_corpusmill_over_datatrove"] = {"cpu": round(cpu_ratio, 3), "wall": round(wall_ratio, 3)}
        print(f"corpusmill / datatrove (median of per-round ratios): cpu {cpu_ratio:.3f}, wall {wall_ratio:.3f} "
              f"(bar: cpu ≤ 0.2)")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
