"""The whole cleaning stage against the field: corpusmill's clean stage (filters, exact and near dedup) against
datatrove's equivalent pipeline on the same English text, CPU seconds per MB, wall and peak RSS, interleaved rounds
(issue 44, item 5).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_field.py [--mb 100] [--rounds 2]
        [--corpus-dir /tmp/bench_field_corpus] [--dt-python /tmp/dtvenv/bin/python] [--sides datatrove,corpusmill]
        [--json OUT.json]

**The input**: the English records of the shared sample (``../shared/corpora/real_text_sample.jsonl.gz``, or under
``$CORPUSMILL_SHARED``; 7,197 documents, 22.3 MB) grown to ``--mb`` MB of UTF-8 text by the project's corpus grower
(``scale_corpus.grow``, as ``bench_scale.py`` uses it): three quarters fresh real text (the sample, then this machine's English package
documentation and man pages), one quarter edited copies (word edits at 1-35%, so some are near-duplicates of their
original and some are not); never two identical texts. Written once to one ``part-000.jsonl.gz`` under
``--corpus-dir`` and reused while its ``corpus.json`` says the same size and seed.

The two sides, on that file, each in a fresh process, one worker each:

* **datatrove** (0.10.1), every stage on ``LocalPipelineExecutor(workers=1)``, in one process, one after the other:

  1. ``JsonlReader`` → ``GopherRepetitionFilter`` → ``GopherQualityFilter`` → ``FineWebQualityFilter`` →
     ``JsonlWriter`` (tasks=1; all at their defaults, English);
  2. exact dedup of whole documents, datatrove's ``ExactDedupSignature`` → ``ExactFindDedups`` → ``JsonlReader`` →
     ``ExactDedupFilter`` → ``JsonlWriter`` (``ExactDedupConfig(content_getter=<the document's text>)``, tasks=1);
  3. its four MinHash stages as ``examples/minhash_deduplication.py`` runs them, ``MinhashConfig()`` defaults
     (5-gram words, 14 buckets × 8 hashes, 64-bit xxhash): ``MinhashDedupSignature`` (tasks=1),
     ``MinhashDedupBuckets`` (tasks = num_buckets = 14, which it requires, run one after the other by the one
     worker), ``MinhashDedupCluster`` (tasks=1), ``JsonlReader`` → ``MinhashDedupFilter`` → ``JsonlWriter`` (tasks=1).

  The CPU and wall time of each of those three parts is reported too (``resource.getrusage`` around each), so the
  ratio without exact dedup (the issue's wording: filters then the four MinHash stages) can be read off as well.
* **corpusmill**: the clean stage of ``corpusmill prepare configs/demo.yaml`` (``pipelines.run.run_stages(cfg,
  ("clean",))``, the code ``prepare`` runs first): read, normalize (NFC, whitespace; it always runs), the
  Gopher/C4/FineWeb filters at their defaults, exact dedup and near dedup at their defaults (MinHash, 5-gram words,
  128 permutations, 25 × 5 bands, verified at Jaccard 0.8), Parquet out, with ``quality``, ``pii``, ``langid``,
  ``url_filter`` and ``extract`` off, on ``runner.name=direct, runner.workers=1``.

Measured per run: wall seconds (``time.perf_counter`` around the subprocess); CPU seconds of the whole process
tree (user + system of ``resource.getrusage(RUSAGE_CHILDREN)`` before and after: every descendant that was waited
for counts; each side also reports its own tree's CPU at exit, printed beside ours as a cross-check); and memory: a
psutil thread samples the RSS of every process of the side's tree every ``--sample-s`` seconds (0.2), reported as
the largest single process's peak and the peak of the tree's sum (RSS counts shared pages in each process, so the
sum is an upper bound). Rounds are interleaved and alternate the order (A B, B A, ...), so a busy moment of the
shared machine hits both sides alike. Reported: CPU s per MB of text, the median over rounds of each side, and the
median of the per-round ratios corpusmill/datatrove (bars: CPU ≤ 0.2× datatrove's, peak RSS ≤ 2× datatrove's).

**The datatrove venv**: as ``bench_web.py``'s (``/tmp/dtvenv``: ``pip install datatrove==0.10.1 nltk spacy==3.8.18``)
plus ``'xxhash<4' tokenizers`` (from datatrove's ``processing`` extra: MinHash's and exact dedup's default hash;
``datatrove.pipeline.dedup`` imports ``tokenizers``). ``--dt-python`` names its python.

This file is also each side's program (``--side-datatrove``, ``--side-corpusmill``): its top level imports only the
standard library, so the datatrove venv runs it too.
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
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MB = 1_000_000
MiB = 1 << 20
SAMPLE = Path(os.environ.get("CORPUSMILL_SHARED", REPO.parent / "shared")) / "corpora" / "real_text_sample.jsonl.gz"
CORPUSMILL_OFF = ("quality.enabled=false", "pii.enabled=false", "langid.enabled=false", "url_filter.enabled=false",
                  "extract.enabled=false")
CORPUSMILL_ON = ("filters.enabled=true", "exact_dedup.enabled=true", "near_dedup.enabled=true")


def _tree_cpu() -> float:
    """CPU seconds (user + system) of this process and every descendant it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _report(counts: dict) -> None:
    print("SIDE-RESULT " + json.dumps({"own_tree_cpu_s": round(_tree_cpu(), 3), **counts}), flush=True)


# ------------------------------------------------------------------------------------------ the datatrove side

def _text_of(doc) -> str:  # ExactDedupConfig reads the return annotation to pick its hash function's input type
    return doc.text


def side_datatrove(corpus: Path, out: Path) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import (ExactDedupConfig, ExactDedupFilter, ExactDedupSignature, ExactFindDedups,
                                          MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter,
                                          MinhashDedupSignature)
    from datatrove.pipeline.filters import FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.typeshelper import Languages

    minhash = MinhashConfig()  # its defaults: 5-gram words, 14 buckets x 8 hashes, 64-bit xxhash
    exact = ExactDedupConfig(content_getter=_text_of)
    filtered, deduped, final = out / "filtered", out / "exact_deduped", out / "output"
    parts: dict[str, dict] = {}
    stats: list[dict] = []

    def run(part: str, label: str, pipeline: list, tasks: int = 1) -> None:
        cpu0, t0 = _tree_cpu(), time.perf_counter()
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=1,
                              logging_dir=str(out / "logs" / label)).run()
        p = parts.setdefault(part, {"cpu_s": 0.0, "wall_s": 0.0})
        p["cpu_s"] = round(p["cpu_s"] + _tree_cpu() - cpu0, 3)
        p["wall_s"] = round(p["wall_s"] + time.perf_counter() - t0, 3)
        for step in json.loads((out / "logs" / label / "stats.json").read_text()):
            s = step.get("stats", {})
            total = s.get("total", (s.get("documents") or {}).get("total"))
            forwarded = s.get("forwarded", None if total is None else total - s.get("dropped", 0))
            stats.append({"stage": label, "name": step.get("name"), "total": total, "forwarded": forwarded})

    run("filters", "filters", [JsonlReader(str(corpus.parent), glob_pattern=corpus.name, recursive=False),
                               GopherRepetitionFilter(), GopherQualityFilter(), FineWebQualityFilter(),
                               JsonlWriter(str(filtered))])
    run("exact_dedup", "exact_1_signature", [JsonlReader(str(filtered)),
                                             ExactDedupSignature(str(out / "exact_sigs"), config=exact)])
    run("exact_dedup", "exact_2_find", [ExactFindDedups(str(out / "exact_sigs"), str(out / "exact_dups"),
                                                        config=exact)])
    run("exact_dedup", "exact_3_filter", [JsonlReader(str(filtered)),
                                          ExactDedupFilter(str(out / "exact_dups"), config=exact),
                                          JsonlWriter(str(deduped))])
    run("minhash", "minhash_1_signature", [JsonlReader(str(deduped)),
                                           MinhashDedupSignature(str(out / "mh_sigs"), config=minhash,
                                                                 language=Languages.english)])
    run("minhash", "minhash_2_buckets", [MinhashDedupBuckets(str(out / "mh_sigs"), str(out / "mh_buckets"),
                                                             config=minhash)], tasks=minhash.num_buckets)
    run("minhash", "minhash_3_cluster", [MinhashDedupCluster(str(out / "mh_buckets"), str(out / "mh_remove"),
                                                             config=minhash)])
    run("minhash", "minhash_4_filter", [JsonlReader(str(deduped)), MinhashDedupFilter(str(out / "mh_remove")),
                                        JsonlWriter(str(final))])

    def count(folder: Path) -> int:
        import gzip

        n = 0
        for path in folder.glob("*.jsonl.gz"):
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                n += sum(1 for _ in fh)
        return n

    _report({"side": "datatrove", "read": stats[0]["total"], "after_filters": count(filtered),
             "after_exact": count(deduped), "kept": count(final), "parts": parts, "steps": stats})


# ----------------------------------------------------------------------------------------- the corpusmill side

def side_corpusmill(corpus: Path, out: Path, config: Path) -> None:
    sys.path.insert(0, str(REPO))
    from pipelines.config import load_config
    from pipelines.run import run_stages

    overrides = [f"input.paths=[{corpus}]", f"output.runs_dir={out}", "name=bench_field", "runner.name=direct",
                 "runner.workers=1", *CORPUSMILL_OFF, *CORPUSMILL_ON]
    cfg = load_config(config, overrides)
    run_stages(cfg, ("clean",), log=lambda _: None)
    stats = json.loads((out / "bench_field" / "stats.json").read_text())
    steps = [{"name": s["step"], "in": s["in"], "kept": s["kept"], "removed_by_reason": s["removed_by_reason"]}
             for s in stats["steps"]]
    _report({"side": "corpusmill", "read": stats["documents_read"], "kept": stats["kept"],
             "quarantined": stats["quarantined"], "steps": steps, "balanced": stats["accounting"]["balanced"]})


# --------------------------------------------------------------------------------------------------- harness

def build_corpus(target_mb: float, corpus_dir: Path, seed: int = 0) -> dict:
    """The English records of the shared sample grown to ``target_mb`` MB of text (see the module docstring);
    reused when ``corpus.json`` under ``corpus_dir`` names the same size and seed."""
    meta_path, corpus = corpus_dir / "corpus.json", corpus_dir / "part-000.jsonl.gz"
    if meta_path.exists() and corpus.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("target_mb") == target_mb and meta.get("seed") == seed:
            return meta
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from scale_corpus import grow, host_documents, read_jsonl, write_corpus  # the grower bench_scale.py uses

    base = [d for d in read_jsonl(str(SAMPLE)) if d.get("lang") == "en"]
    site = next(Path(sys.prefix).glob("lib/python3*/site-packages"), None)
    extra = (d for d in host_documents(site_packages=str(site) if site else None) if d["lang"] == "en")
    docs = grow(base, int(target_mb * MB), seed=seed, extra_docs=extra)
    write_corpus(docs, str(corpus_dir), files=1)
    sources: dict[str, int] = {}
    for d in docs:
        key = "edited_copy" if "~edit" in d["id"] else d["source"]
        sources[key] = sources.get(key, 0) + 1
    meta = {"target_mb": target_mb, "seed": seed, "path": str(corpus), "docs": len(docs),
            "text_mb": round(sum(len(d["text"].encode()) for d in docs) / MB, 3),
            "file_mb": round(corpus.stat().st_size / MB, 3), "base_en_docs": len(base), "by_source": sources}
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    return meta


class TreeRss(threading.Thread):
    """Every ``interval`` s: the RSS of the process ``pid`` and each of its descendants; keeps each process's peak
    and the peak of their sum."""

    def __init__(self, pid: int, interval: float):
        super().__init__(daemon=True)
        import psutil  # the harness's venv has it; the sides' programs never start this thread

        self.psutil, self.root, self.interval = psutil, pid, interval
        self.procs: dict[int, dict] = {}
        self.peak_sum = 0
        self.stop = threading.Event()

    def sample(self) -> None:
        ps = self.psutil
        try:
            root = ps.Process(self.root)
            tree = [root] + root.children(recursive=True)
        except ps.NoSuchProcess:
            return
        total = 0
        for proc in tree:
            try:
                rss = proc.memory_info().rss
                info = self.procs.get(proc.pid)
                if info is None:
                    info = self.procs[proc.pid] = {"cmd": " ".join(proc.cmdline())[:200], "peak_rss": 0}
            except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess):
                continue
            info["peak_rss"] = max(info["peak_rss"], rss)
            total += rss
        self.peak_sum = max(self.peak_sum, total)

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.interval)


def _kind(cmd: str, root_cmd: str, is_root: bool) -> str:
    if is_root:
        return "main"
    if cmd == root_cmd:  # a fork of the side's process: datatrove's multiprocess.Manager (one per executor)
        return "fork_of_main"
    if "beam" in cmd or "worker" in cmd:
        return "worker"
    return "other"


def run_side(side: str, args, corpus: Path, workdir: Path) -> dict:
    out = workdir / side
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if side == "datatrove":
        cmd = [args.dt_python, str(Path(__file__).resolve()), "--side-datatrove", "--corpus", str(corpus),
               "--out", str(out)]
    else:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--side-corpusmill", "--corpus", str(corpus),
               "--out", str(out), "--config", str(args.config)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    log_path = workdir / f"{side}.log"
    cpu0, t0 = _tree_cpu(), time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        sampler = TreeRss(proc.pid, args.sample_s)
        sampler.start()
        stdout = proc.stdout.read()
        rc = proc.wait()
    wall, cpu = time.perf_counter() - t0, _tree_cpu() - cpu0
    sampler.stop.set()
    sampler.join()
    result = None
    for line in stdout.splitlines():
        if line.startswith("SIDE-RESULT "):
            result = json.loads(line[len("SIDE-RESULT "):])
    if rc != 0 or result is None:
        tail = "\n".join(log_path.read_text(errors="replace").strip().splitlines()[-15:])
        raise SystemExit(f"{side} failed (exit {rc}):\n{tail}")
    kinds: dict[str, dict] = {}
    root_cmd = sampler.procs.get(proc.pid, {}).get("cmd", "")
    for pid, info in sampler.procs.items():
        k = kinds.setdefault(_kind(info["cmd"], root_cmd, pid == proc.pid), {"n": 0, "peak_rss_mib": 0.0})
        k["n"] += 1
        k["peak_rss_mib"] = round(max(k["peak_rss_mib"], info["peak_rss"] / MiB), 1)
    largest = max((i["peak_rss"] for i in sampler.procs.values()), default=0)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_rss_largest_mib": round(largest / MiB, 1),
            "peak_rss_sum_mib": round(sampler.peak_sum / MiB, 1), "processes": kinds, **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=100.0, help="MB of English text to grow the corpus to")
    parser.add_argument("--corpus-dir", type=Path, help="where the grown corpus is built once and reused "
                                                        "(default: /tmp/bench_field_corpus_<mb>)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dt-python", default="/tmp/dtvenv/bin/python",
                        help="python of a venv with datatrove (see the module docstring)")
    parser.add_argument("--sides", default="datatrove,corpusmill")
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "demo.yaml")
    parser.add_argument("--sample-s", type=float, default=0.2, help="RSS sampling interval, seconds")
    parser.add_argument("--build-only", action="store_true", help="build the corpus and stop")
    parser.add_argument("--json", type=Path, help="write every round's figures here")
    parser.add_argument("--workdir", type=Path, help="where the sides write (default: a temporary folder)")
    parser.add_argument("--side-datatrove", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--side-corpusmill", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side_datatrove:
        return side_datatrove(args.corpus, args.out)
    if args.side_corpusmill:
        return side_corpusmill(args.corpus, args.out, args.config)

    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = set(sides) - {"datatrove", "corpusmill"}
    if unknown:
        raise SystemExit(f"--sides: unknown {sorted(unknown)}; expected datatrove and/or corpusmill")
    if "datatrove" in sides and not Path(args.dt_python).exists():
        raise SystemExit(f"--dt-python {args.dt_python} does not exist: create the venv (see this script's docstring)")
    if not SAMPLE.exists():
        raise SystemExit(f"the shared sample {SAMPLE} is missing: nothing to grow the corpus from")
    corpus_dir = args.corpus_dir or Path(f"/tmp/bench_field_corpus_{args.mb:g}")
    started = time.perf_counter()
    meta = build_corpus(args.mb, corpus_dir)
    corpus = Path(meta["path"])
    text_mb = meta["text_mb"]
    print(f"corpus {corpus}: {meta['docs']} documents, {text_mb:.2f} MB of text, {meta['file_mb']:.2f} MB gzipped "
          f"({meta['by_source']}; ready in {time.perf_counter() - started:.0f} s); {args.rounds} interleaved rounds, "
          f"one worker per side; load average {os.getloadavg()[0]:.2f}", flush=True)
    if args.build_only:
        return
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_field-"))
    rounds: list[dict] = []
    loads: list[float] = []
    for r in range(args.rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        row = {}
        for side in order:
            loads.append(os.getloadavg()[0])
            res = run_side(side, args, corpus, workdir)
            row[side] = res
            print(f"round {r + 1} {side:<10} wall {res['wall_s']:7.2f} s  cpu {res['cpu_s']:7.2f} s (its own count "
                  f"{res['own_tree_cpu_s']:.2f})  cpu/MB {res['cpu_s'] / text_mb:.3f}  peak RSS largest "
                  f"{res['peak_rss_largest_mib']:.0f} MiB, sum {res['peak_rss_sum_mib']:.0f} MiB "
                  f"{res['processes']}  read {res['read']} kept {res['kept']}", flush=True)
        rounds.append(row)
    first = rounds[0]
    if "datatrove" in first:
        d = first["datatrove"]
        print(f"datatrove: read {d['read']}, after filters {d['after_filters']}, after exact dedup "
              f"{d['after_exact']}, kept {d['kept']}; parts {d['parts']}")
    if "corpusmill" in first:
        c = first["corpusmill"]
        print(f"corpusmill: read {c['read']}, kept {c['kept']}, quarantined {c['quarantined']}, balanced "
              f"{c['balanced']}; steps: " + "; ".join(f"{s['name']}: {s['in']} in, {s['kept']} kept"
                                                       for s in c["steps"]))
    summary = {"corpus": meta, "rounds": rounds, "load_avg_1min": [round(x, 2) for x in loads]}
    for side in sides:
        med = {k: statistics.median(rw[side][k] for rw in rounds)
               for k in ("cpu_s", "wall_s", "peak_rss_largest_mib", "peak_rss_sum_mib")}
        summary[side] = {**med, "cpu_s_per_mb": round(med["cpu_s"] / text_mb, 4)}
        print(f"{side:<10} median: cpu {med['cpu_s']:.2f} s ({summary[side]['cpu_s_per_mb']:.3f} s/MB), wall "
              f"{med['wall_s']:.2f} s, peak RSS largest {med['peak_rss_largest_mib']:.0f} MiB, "
              f"sum {med['peak_rss_sum_mib']:.0f} MiB")
    if len(sides) == 2:
        def ratio(key: str, den=lambda rw: rw["datatrove"]) -> float:
            return round(statistics.median(rw["corpusmill"][key] / den(rw)[key] for rw in rounds), 3)

        no_exact = statistics.median(rw["corpusmill"]["cpu_s"] / (rw["datatrove"]["cpu_s"] - rw["datatrove"]["parts"]
                                                                  ["exact_dedup"]["cpu_s"]) for rw in rounds)
        summary["ratio_corpusmill_over_datatrove"] = r = {
            "cpu": ratio("cpu_s"), "wall": ratio("wall_s"), "cpu_vs_datatrove_without_exact": round(no_exact, 3),
            "peak_rss_largest": ratio("peak_rss_largest_mib"), "peak_rss_sum": ratio("peak_rss_sum_mib")}
        print(f"corpusmill / datatrove (median of per-round ratios): cpu {r['cpu']:.3f} (against datatrove without "
              f"its exact dedup {r['cpu_vs_datatrove_without_exact']:.3f}), wall {r['wall']:.3f}, peak RSS largest "
              f"process {r['peak_rss_largest']:.2f}, sum {r['peak_rss_sum']:.2f} (bars: cpu ≤ 0.2, RSS ≤ 2)")
    print(f"load average over the runs: {min(loads):.2f}-{max(loads):.2f}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
