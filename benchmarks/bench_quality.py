"""Quality scoring: held-out accuracy (per subtype) and scoring throughput, pure core and through Beam.

    .venv/bin/python benchmarks/bench_quality.py accuracy --data ../shared/eval/quality_train.jsonl.gz \
        --seeds 0,1,2 --save benchmarks/out/quality.bin
    .venv/bin/python benchmarks/bench_quality.py speed --model benchmarks/out/quality.bin \
        --data ../shared/eval/quality_train.jsonl.gz

accuracy: for each seed, a group-disjoint held-out split (heldout_fraction of the groups, chosen by a hash of
(seed, group)); the model is trained on the rest with the default QualityTrainConfig. Reports the stacked model
and its own fastText stage alone, overall and per subtype.

speed: docs per CPU-second (process CPU time, so that other load on a shared machine does not count) and per
wall-second, on one worker:
  * pure core: QualityModel.score on batches, and fastText alone on the same batches (the baseline, same run);
  * Beam: FnApiRunner in-process, one worker: read JSONL -> QualityFilter -> count, against the same pipeline
    without the step (read -> count) measured in the same run; the step's own rate is
    docs / (cpu(with step) - cpu(without step)).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402


def _accuracy(args) -> None:
    from transforms.quality_model import QualityTrainConfig, load_labeled, train_quality_model

    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        cfg = QualityTrainConfig(seed=seed)
        records, problems = load_labeled(args.data, cfg)
        started = time.time()
        model, card = train_quality_model(records, cfg, log=lambda m: print(m, file=sys.stderr))
        m = card["metrics"]
        by = m["by_subtype"]
        row = {"seed": seed, "heldout": m["stacked"]["n"], "train_s": round(time.time() - started, 1),
               **{f"stacked_{k}": round(v, 4) for k, v in m["stacked"].items() if k != "n"},
               **{f"fasttext_{k}": round(v, 4) for k, v in m["fasttext_only"].items() if k != "n"},
               "by_subtype": {k: (v["n"], round(v["accuracy"], 3), round(v["fasttext_only_accuracy"], 3))
                              for k, v in by.items()}}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.save and seed == int(args.seeds.split(",")[0]):
            model.save(args.save, card)
    print("\n| seed | held-out docs | accuracy | precision | recall | AUC | word_salad | markov_babble | "
          "fastText-only acc / word_salad / markov |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ws, mb = r["by_subtype"]["word_salad"], r["by_subtype"]["markov_babble"]
        print(f"| {r['seed']} | {r['heldout']} | {r['stacked_accuracy']:.4f} | {r['stacked_precision']:.4f} | "
              f"{r['stacked_recall']:.4f} | {r['stacked_auc']:.4f} | {ws[1]:.3f} (n={ws[0]}) | {mb[1]:.3f} (n={mb[0]}) "
              f"| {r['fasttext_accuracy']:.4f} / {ws[2]:.3f} / {mb[2]:.3f} |")


def _texts(path: str, n: int) -> list[str]:
    texts = []
    with gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8") as fh:
        for line in fh:
            texts.append(json.loads(line)["text"])
    reps = -(-n // len(texts))
    return (texts * reps)[:n]


def _timed(fn) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def _speed(args) -> None:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from transforms.quality import QualityConfig, QualityFilter
    from transforms.quality_model import QualityModel, tokenize_head, DEFAULT_MAX_CHARS

    texts = _texts(args.data, args.docs)
    mean_chars = sum(map(len, texts)) / len(texts)
    print(f"{len(texts)} documents, mean {mean_chars:.0f} characters")
    model = QualityModel.load(args.model)
    batch = args.batch_size

    def full():
        for i in range(0, len(texts), batch):
            model.score(texts[i:i + batch])

    def fasttext_only():
        for i in range(0, len(texts), batch):
            model.fasttext_hq([tokenize_head(t, DEFAULT_MAX_CHARS) for t in texts[i:i + batch]])

    full()  # warm caches (token memo) the way a long-running worker has them
    results = {}
    for name, fn in (("core: fastText alone (baseline)", fasttext_only), ("core: full quality model", full)):
        cpu, wall = _timed(fn)
        results[name] = (len(texts) / cpu, len(texts) / wall)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "docs.jsonl")
        with open(path, "w", encoding="utf-8") as fh:
            for i, text in enumerate(texts):
                fh.write(json.dumps({"id": i, "text": text, "source": "bench", "meta": {}, "annotations": {}}) + "\n")
        cfg = QualityConfig(batch_size=batch)

        def pipeline(with_step: bool):
            options = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
            with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
                docs = p | beam.io.ReadFromText(path) | "Parse" >> beam.Map(json.loads)
                if with_step:
                    out = docs | QualityFilter(cfg, args.model)
                    docs = (out["kept"], out["removed"]) | beam.Flatten()
                _ = docs | beam.combiners.Count.Globally()

        pipeline(True)  # warm-up: imports, first model load
        base_cpu, base_wall = _timed(lambda: pipeline(False))
        step_cpu, step_wall = _timed(lambda: pipeline(True))
    n = len(texts)
    results["beam: read+parse+count (baseline)"] = (n / base_cpu, n / base_wall)
    results["beam: read+parse+QualityFilter+count"] = (n / step_cpu, n / step_wall)
    results["beam: QualityFilter step alone (difference)"] = (n / max(step_cpu - base_cpu, 1e-9),
                                                              n / max(step_wall - base_wall, 1e-9))
    print("\n| measurement (one worker) | docs per CPU-second | docs per wall-second |")
    print("|---|---|---|")
    for name, (per_cpu, per_wall) in results.items():
        print(f"| {name} | {per_cpu:,.0f} | {per_wall:,.0f} |")
    core = results["core: full quality model"][0] / results["core: fastText alone (baseline)"][0]
    print(f"\nfull model / fastText alone (core, CPU time): {core:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    acc = sub.add_parser("accuracy")
    acc.add_argument("--data", default="../shared/eval/quality_train.jsonl.gz")
    acc.add_argument("--seeds", default="0")
    acc.add_argument("--save", help="save the first seed's model here (for `speed`)")
    speed = sub.add_parser("speed")
    speed.add_argument("--model", required=True)
    speed.add_argument("--data", default="../shared/eval/quality_train.jsonl.gz")
    speed.add_argument("--docs", type=int, default=16000)
    speed.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    {"accuracy": _accuracy, "speed": _speed}[args.what](args)


if __name__ == "__main__":
    main()
