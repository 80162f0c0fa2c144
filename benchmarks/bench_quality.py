"""Quality scoring: held-out accuracy (per subtype) and scoring throughput, pure core and through Beam.

    .venv/bin/python benchmarks/bench_quality.py accuracy --data ../shared/eval/quality_train.jsonl.gz \
        --seeds 0,1,2 --save benchmarks/out/quality.bin
    .venv/bin/python benchmarks/bench_quality.py speed --model benchmarks/out/quality.bin \
        --data ../shared/corpora/real_text_sample.jsonl.gz --docs 10000
    .venv/bin/python benchmarks/bench_quality.py real-text --out new.json [--against main.json]   # the guard

accuracy: for each seed, a group-disjoint held-out split (heldout_fraction of the groups, chosen by a hash of
(seed, group)); the model is trained on the rest with the default QualityTrainConfig. Reports the stacked model
and its own fastText stage alone, overall and per subtype.

Chinese (``--lang zh``: the default Chinese recipe, characters as tokens):

    .venv/bin/python benchmarks/bench_quality.py accuracy --lang zh --data ../shared/eval/quality_zh_dev.jsonl.gz \
        --seeds 0,1,2,3,4                                   # group-disjoint held-out splits of the dev set
    .venv/bin/python benchmarks/bench_quality.py accuracy --lang zh --data ../shared/eval/quality_zh_dev.jsonl.gz \
        --heldout 0 --test fresh_zh.jsonl.gz                # trained on all of it, tested on fresh data
    .venv/bin/python benchmarks/bench_quality.py accuracy --lang zh --data data/quality/quality_zh_train.jsonl.gz \
        --test ../shared/eval/quality_zh_dev.jsonl.gz --save benchmarks/out/quality_zh.bin   # the shipped model
    .venv/bin/python benchmarks/bench_quality.py fresh-zh --out fresh_zh.jsonl.gz   # fresh test data (below)
    .venv/bin/python benchmarks/bench_quality.py speed --lang zh --model benchmarks/out/quality_zh.bin

fresh-zh: labelled test data made the way the shipped data is (``data/quality/build_zh_subset.py``) but only
from documents of the real-text sample that neither the dev set nor the shipped data contains (People's Daily
included: it is measured here, never shipped).

speed: docs per CPU-second (process CPU time, so that other load on a shared machine does not count) and per
wall-second, on one worker:
  * pure core: QualityModel.score on batches, and fastText alone on the same batches (the baseline, same run),
    on text the model never saw (the shared real-text sample); first pass with a fresh model (its token table
    fills as it meets new word forms), second pass warm, as a long-running worker is;
  * Beam: FnApiRunner in-process, one worker, both passes: read JSONL -> QualityFilter -> count, against the
    same pipeline without the step (read -> count) measured in the same run; the step's own rate is
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


def _train_config(args, seed: int):
    from transforms.quality.model import QualityTrainConfig
    from transforms.quality.step import zh_train_defaults

    base = zh_train_defaults() if args.lang == "zh" else QualityTrainConfig()
    update = {"seed": seed, **json.loads(args.params or "{}")}
    if args.heldout is not None:
        update["heldout_fraction"] = args.heldout
    return base.model_copy(update=update)


def _score_file(model, path: str) -> dict:
    """Accuracy of ``model`` on a labelled file, overall and per subtype (and per source of the hq records)."""
    with gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8") as fh:
        recs = [json.loads(line) for line in fh]
    scores = model.score([r["text"] for r in recs])
    truth = np.array([r["label"] == "hq" for r in recs])
    out = {"n": len(recs), "accuracy": float(((scores["score"] >= 0.5) == truth).mean()),
           "fasttext_only": float(((scores["fasttext"] >= 0.5) == truth).mean()), "by_subtype": {}, "hq_by_source": {}}
    for key, field, only_hq in (("by_subtype", "subtype", False), ("hq_by_source", "source", True)):
        for value in sorted({r.get(field) for r in recs if not only_hq or r["label"] == "hq"}):
            mask = np.array([r.get(field) == value and (not only_hq or r["label"] == "hq") for r in recs])
            out[key][value] = (int(mask.sum()), round(float(((scores["score"][mask] >= 0.5) == truth[mask]).mean()), 3))
    return out


def _fresh_zh(args) -> None:
    """Fresh Chinese test data: build_zh_subset's recipe on documents neither the dev set nor the shipped data has."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_zh", os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "data", "quality", "build_zh_subset.py"))
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    shipped = "data/quality/quality_zh_train.jsonl.gz"
    with gzip.open(shipped, "rt", encoding="utf-8") as fh:
        used = set()
        for line in fh:
            r = json.loads(line)
            used.add(r["group"])
            used.update(r.get("derived_from", []))
    build.SOURCES = build.SOURCES + ("peoples_daily_zh",)
    build.SEED = "corpusmill-quality-zh-fresh-test"
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl.gz", delete=False) as tmp:
        pass
    with gzip.open(tmp.name, "wt", encoding="utf-8") as fh:  # the shipped groups, as an exclusion file
        for g in sorted(used):
            fh.write(json.dumps({"group": g}) + "\n")
    records = build.build(args.sample, [args.dev, tmp.name])
    os.unlink(tmp.name)
    with gzip.open(args.out, "wt", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(records)} records from {len({r['group'] for r in records})} documents -> {args.out}")


def _accuracy(args) -> None:
    from transforms.quality.model import load_labeled, train_quality_model

    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        cfg = _train_config(args, seed)
        records, problems = load_labeled(args.data, cfg)
        started = time.time()
        model, card = train_quality_model(records, cfg, log=lambda m: print(m, file=sys.stderr))
        if args.test:
            for path in args.test:
                print(json.dumps({"seed": seed, "trained_on": args.data, "records": len(records),
                                  "tested_on": path, **_score_file(model, path)}), flush=True)
        if args.save and seed == int(args.seeds.split(",")[0]):
            model.save(args.save, card)
        if "metrics" not in card:
            continue
        m = card["metrics"]
        by = m["by_subtype"]
        row = {"seed": seed, "heldout": m["stacked"]["n"], "train_s": round(time.time() - started, 1),
               **{f"stacked_{k}": round(v, 4) for k, v in m["stacked"].items() if k != "n"},
               **{f"fasttext_{k}": round(v, 4) for k, v in m["fasttext_only"].items() if k != "n"},
               "by_subtype": {k: (v["n"], round(v["accuracy"], 3), round(v["fasttext_only_accuracy"], 3))
                              for k, v in by.items()}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if not rows:
        return
    if args.lang == "zh":
        subtypes = sorted({k for r in rows for k in r["by_subtype"]})
        print("\n| seed | held-out docs | accuracy | AUC | " + " | ".join(subtypes) + " | fastText alone |")
        print("|---|---|---|---|" + "---|" * (len(subtypes) + 1))
        for r in rows:
            cells = [f"{r['by_subtype'][k][1]:.3f} ({r['by_subtype'][k][0]})" if k in r["by_subtype"] else "-"
                     for k in subtypes]
            print(f"| {r['seed']} | {r['heldout']} | {r['stacked_accuracy']:.4f} | {r['stacked_auc']:.4f} | "
                  + " | ".join(cells) + f" | {r['fasttext_accuracy']:.4f} |")
        pooled = {k: (sum(r["by_subtype"][k][0] for r in rows if k in r["by_subtype"]),
                      sum(r["by_subtype"][k][0] * r["by_subtype"][k][1] for r in rows if k in r["by_subtype"]))
                  for k in subtypes}
        n = sum(r["heldout"] for r in rows)
        acc = sum(r["heldout"] * r["stacked_accuracy"] for r in rows) / n
        print(f"| pooled | {n} | {acc:.4f} | | " + " | ".join(f"{c / t:.3f} ({t})" for t, c in pooled.values())
              + " | |")
        return
    print("\n| seed | held-out docs | accuracy | precision | recall | AUC | word_salad | markov_babble | "
          "fastText-only acc / word_salad / markov |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ws, mb = r["by_subtype"]["word_salad"], r["by_subtype"]["markov_babble"]
        print(f"| {r['seed']} | {r['heldout']} | {r['stacked_accuracy']:.4f} | {r['stacked_precision']:.4f} | "
              f"{r['stacked_recall']:.4f} | {r['stacked_auc']:.4f} | {ws[1]:.3f} (n={ws[0]}) | {mb[1]:.3f} (n={mb[0]}) "
              f"| {r['fasttext_accuracy']:.4f} / {ws[2]:.3f} / {mb[2]:.3f} |")


def _pipeline(args) -> None:
    """Accuracy through the pipeline's own path (``corpusmill quality score``: normalize -> langid -> routing to the
    model of each document's language, or to the policy for unmodelled / unsure languages -> decision), with a model
    trained on the other groups of ``--data``: what a user of ``prepare`` gets, where ``accuracy`` scores the model
    alone. keep == (label == hq) counts as correct."""
    import subprocess

    from transforms.quality.model import load_labeled, split_records, train_quality_model

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        cfg = _train_config(args, seed)
        records, _ = load_labeled(args.data, cfg)
        train_idx, test_idx = split_records(records, cfg)
        with tempfile.TemporaryDirectory(prefix="bench-quality-pipeline-") as tmp:
            model, card = train_quality_model([records[i] for i in train_idx],
                                              cfg.model_copy(update={"heldout_fraction": 0.0}),
                                              log=lambda m: print(m, file=sys.stderr))
            model_path = os.path.join(tmp, f"quality_{args.lang}.bin")
            model.save(model_path, card)
            test = [records[i] for i in test_idx]
            test_path = os.path.join(tmp, "heldout.jsonl")
            with open(test_path, "w", encoding="utf-8") as fh:
                for r in test:
                    fh.write(json.dumps({"id": r["id"], "text": r["text"]}, ensure_ascii=False) + "\n")
            config = os.path.join(tmp, "config.yaml")
            with open(config, "w", encoding="utf-8") as fh:
                fh.write(f"name: bench\noutput: {{runs_dir: {args.runs_dir}}}\nquality:\n  "
                         + (f"model: {model_path}\n" if args.lang == "en" else
                            f"models:\n    {args.lang}:\n      model: {model_path}\n")
                         + "".join(f"  {line}\n" for line in (args.quality or [])))
            out = os.path.join(tmp, "scores.jsonl")
            subprocess.run([sys.executable, "-m", "cli.main", "quality", "score", test_path, "--config", config,
                            "--out", out, "--id-field", "id", "--runner", "inprocess"], check=True, cwd=root,
                           env={**os.environ, "PYTHONPATH": root})
            with open(out, encoding="utf-8") as fh:
                rows_out = {row["id"]: row for row in map(json.loads, fh)}
            kept = {doc_id: row["keep"] for doc_id, row in rows_out.items()}
        correct = np.array([kept[r["id"]] == (r["label"] == "hq") for r in test])
        if args.dump:  # the misjudged documents, to read (labels and subtypes only describe them here)
            with open(args.dump, "a", encoding="utf-8") as fh:
                for r, right in zip(test, correct):
                    if not right:
                        fh.write(json.dumps({"seed": seed, "id": r["id"], "label": r["label"], "subtype": r["subtype"],
                                             "source": r.get("source"), **rows_out[r["id"]], "text": r["text"]},
                                            ensure_ascii=False) + "\n")
        by = {}
        for value in sorted({r["subtype"] for r in test}):
            mask = np.array([r["subtype"] == value for r in test])
            by[value] = (int(mask.sum()), int(correct[mask].sum()))
        row = {"seed": seed, "heldout": len(test), "accuracy": round(float(correct.mean()), 4), "by_subtype": by}
        rows.append(row)
        print(json.dumps(row), flush=True)
    subtypes = sorted({k for r in rows for k in r["by_subtype"]})
    print("\n| seed | held-out docs | accuracy | " + " | ".join(subtypes) + " |")
    print("|---|---|---|" + "---|" * len(subtypes))
    for r in rows + [{"seed": "pooled", "heldout": sum(r["heldout"] for r in rows),
                      "by_subtype": {k: tuple(sum(r["by_subtype"].get(k, (0, 0))[j] for r in rows) for j in (0, 1))
                                     for k in subtypes}}]:
        right = sum(c for _, c in r["by_subtype"].values())
        print(f"| {r['seed']} | {r['heldout']} | {right / r['heldout']:.4f} | "
              + " | ".join(f"{r['by_subtype'][k][1] / r['by_subtype'][k][0]:.3f}" if r["by_subtype"].get(k, (0,))[0]
                           else "-" for k in subtypes) + " |")


def _texts(path: str, n: int, lang: str | None = None) -> list[str]:
    """``n`` texts evenly spaced through ``path``; with ``lang`` (zh) only records of that ``lang`` (all when
    none has the field, as in the labelled sets)."""
    texts = []
    with gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            if lang in (None, "en") or record.get("lang", lang) == lang:
                texts.append(record["text"])
    if n <= len(texts):  # evenly spaced: the file is grouped by source
        return [texts[int(i * len(texts) / n)] for i in range(n)]
    return (texts * -(-n // len(texts)))[:n]


def _timed(fn) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def _speed(args) -> None:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from transforms.quality.step import QualityConfig, QualityFilter
    from transforms.quality.model import QualityModel, fasttext_inputs, DEFAULT_MAX_CHARS

    texts = _texts(args.data, args.docs, args.lang)
    mean_chars = sum(map(len, texts)) / len(texts)
    print(f"{len(texts)} documents from {args.data}, mean {mean_chars:.0f} characters")
    batch = args.batch_size

    def full(model):
        for i in range(0, len(texts), batch):
            model.score(texts[i:i + batch])

    def fasttext_only(model):
        for i in range(0, len(texts), batch):
            model.fasttext_hq_lines(fasttext_inputs(texts[i:i + batch], DEFAULT_MAX_CHARS, model.tokenizer)[0])

    results = {}
    model = QualityModel.load(args.model)
    results["core: fastText alone (baseline)"] = _rates(len(texts), _timed(lambda: fasttext_only(model)))
    # a fresh worker meets new word forms (its token table fills up); a long-running one has met most
    results["core: full model, first pass (cold token table)"] = _rates(len(texts), _timed(lambda: full(model)))
    results["core: full model, second pass (warm)"] = _rates(len(texts), _timed(lambda: full(model)))
    p_fasttext = np.concatenate([model.fasttext_hq_lines(fasttext_inputs(texts[i:i + batch], DEFAULT_MAX_CHARS,
                                                                         model.tokenizer)[0])
                                 for i in range(0, len(texts), batch)])
    print(f"second stage runs on {np.mean(p_fasttext >= model.stacker.gate):.1%} of the documents "
          f"(fastText P(hq) >= gate {model.stacker.gate})")

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "docs.jsonl")
        with open(path, "w", encoding="utf-8") as fh:  # two passes over the texts, as in the core figures
            for i, text in enumerate(texts + texts):
                # as after the langid step: the document's language routes it to the model
                fh.write(json.dumps({"id": i, "text": text, "source": "bench", "meta": {},
                                     "annotations": {"langid": {"lang": args.lang}}}) + "\n")
        cfg = QualityConfig(batch_size=batch)
        models = {args.lang: args.model}

        def pipeline(with_step: bool):
            options = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
            with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
                docs = p | beam.io.ReadFromText(path) | "Parse" >> beam.Map(json.loads)
                if with_step:  # each output counted on its own: no Flatten (it would break fusion)
                    out = docs | QualityFilter(cfg, models)
                    _ = out["kept"] | "CountKept" >> beam.combiners.Count.Globally()
                    _ = out["removed"] | "CountRemoved" >> beam.combiners.Count.Globally()
                else:
                    _ = docs | beam.combiners.Count.Globally()

        pipeline(False)  # warm-up: imports, runner start
        base = _timed(lambda: pipeline(False))
        step = _timed(lambda: pipeline(True))
    n = 2 * len(texts)
    results["beam: read+parse+count (baseline)"] = _rates(n, base)
    results["beam: read+parse+QualityFilter+count"] = _rates(n, step)
    results["beam: QualityFilter step alone (difference)"] = _rates(n, (step[0] - base[0], step[1] - base[1]))
    print("\n| measurement (one worker) | docs per CPU-second | docs per wall-second |")
    print("|---|---|---|")
    for name, (per_cpu, per_wall) in results.items():
        print(f"| {name} | {per_cpu:,.0f} | {per_wall:,.0f} |")
    reference = _reference_seconds()
    print(f"\nload indicator: a fixed reference loop (sum(range(10**7))) took {reference:.3f} CPU-s in this run; "
          f"on a shared machine it grows with contention, and so does every CPU-second figure above")


def _real_documents(args) -> list[dict]:
    """The real English documents the guard scores: every English record of the real-text sample, and every English
    record of the demo corpus with at least ``--demo-min-chars`` characters (Austen, the Bible, news, the Jargon File,
    manuals ...: text that also overlaps the shipped training data, so a model that misjudges its own training text
    is seen too), as {id, source, text}; the demo's ids are ``demo:<url>`` and its sources ``demo/<source>``."""
    docs = []
    with gzip.open(args.data, "rt", encoding="utf-8") as fh:
        docs += [{"id": str(r["id"]), "source": r["source"], "text": r["text"]}
                 for r in map(json.loads, fh) if r.get("lang") == "en"]
    if args.demo:
        with gzip.open(args.demo, "rt", encoding="utf-8") as fh:
            docs += [{"id": f"demo:{r['url']}", "source": f"demo/{r['source']}", "text": r["text"]}
                     for r in map(json.loads, fh) if r.get("lang") == "en" and len(r["text"]) >= args.demo_min_chars]
    return docs


def _real_text(args) -> None:
    """Real-text guard: the default English model of this code (trained on the shipped subset) scores real English
    documents (``_real_documents``; all real, none labelled: dictionary glosses and changelogs are rightly judged low,
    so the share is no accuracy); writes {id: [source, score]} to ``--out`` and prints the share below the threshold
    per source. With ``--against`` (the same file from another checkout, e.g. main) it also prints, per source, the
    documents each judges low and those newly judged low, and lists the verdicts that flip: a model change must not
    remove real prose (Wikipedia, news, books) that the other kept."""
    from collections import Counter

    from transforms.quality.model import QualityTrainConfig, load_labeled, train_quality_model

    cfg = QualityTrainConfig(heldout_fraction=0.0)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    records, _ = load_labeled(os.path.join(root, "data/quality/quality_train_subset.jsonl.gz"), cfg)
    model, _ = train_quality_model(records, cfg, log=lambda m: None)
    docs = _real_documents(args)
    scores = np.concatenate([model.score([d["text"] for d in docs[i:i + 256]])["score"] for i in range(0, len(docs), 256)])
    mine = {d["id"]: [d["source"], float(s)] for d, s in zip(docs, scores)}
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(mine, fh)
    other = None
    if args.against:
        with open(args.against, encoding="utf-8") as fh:
            other = json.load(fh)
    is_low = lambda score: score < args.threshold  # noqa: E731
    low = Counter(src for src, s in mine.values() if is_low(s))
    total = Counter(src for src, _ in mine.values())
    shared = [k for k in mine if other and k in other]
    low_other = Counter(mine[k][0] for k in shared if is_low(other[k][1]))
    newly = Counter(mine[k][0] for k in shared if is_low(mine[k][1]) and not is_low(other[k][1]))
    print(f"| source | docs | judged low quality{' | against | newly low' if other else ''} |")
    print("|---|---|---|" + ("---|---|" if other else ""))
    for src in sorted(total) + ["all"]:
        pick = (lambda c: sum(c.values())) if src == "all" else (lambda c: c[src])  # noqa: E731
        n, k = (len(mine) if src == "all" else total[src]), pick(low)
        print(f"| {src} | {n} | {k} ({k / n:.3f})"
              + (f" | {pick(low_other)} ({pick(low_other) / n:.3f}) | {pick(newly)}" if other else "") + " |")
    if other:
        flips = sorted((mine[k][0], k, other[k][1], mine[k][1]) for k in shared
                       if is_low(mine[k][1]) != is_low(other[k][1]))
        print(f"{len(flips)} verdicts flip ({sum(is_low(f[3]) for f in flips)} to low quality); "
              f"{len(mine) - len(shared)} documents not in --against")
        for src, k, before, after in flips:
            print(f"  {src} {k}: {before:.3f} -> {after:.3f}")


def _rates(n: int, seconds: tuple[float, float]) -> tuple[float, float]:
    cpu, wall = seconds
    return n / max(cpu, 1e-9), n / max(wall, 1e-9)


def _reference_seconds() -> float:
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        sum(range(10**7))
        best = min(best, time.process_time() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    acc = sub.add_parser("accuracy")
    acc.add_argument("--data", default="../shared/eval/quality_train.jsonl.gz")
    acc.add_argument("--seeds", default="0")
    acc.add_argument("--save", help="save the first seed's model here (for `speed`)")
    acc.add_argument("--lang", default="en", choices=("en", "zh"), help="zh: the default Chinese recipe")
    acc.add_argument("--params", help="JSON of QualityTrainConfig overrides")
    acc.add_argument("--heldout", type=float, help="held-out fraction of the groups (0: train on all)")
    acc.add_argument("--test", nargs="*", help="labelled files every trained model is also scored on")
    pipe = sub.add_parser("pipeline", help="held-out accuracy through `corpusmill quality score` (langid routing)")
    pipe.add_argument("--data", default="../shared/eval/quality_train.jsonl.gz")
    pipe.add_argument("--seeds", default="0")
    pipe.add_argument("--lang", default="en", choices=("en", "zh"))
    pipe.add_argument("--params", help="JSON of QualityTrainConfig overrides")
    pipe.add_argument("--heldout", type=float, help="held-out fraction of the groups")
    pipe.add_argument("--dump", help="append each misjudged held-out document (with its scores) to this JSONL file")
    pipe.add_argument("--runs-dir", default="/tmp/bench-quality-runs", help="output.runs_dir: the default models' "
                                                                            "cache (the other language's model)")
    pipe.add_argument("--quality", action="append", help="another line of the quality section, e.g. "
                                                         "'unmodelled: keep'; repeatable")
    fresh = sub.add_parser("fresh-zh")
    fresh.add_argument("--sample", default="../shared/corpora/real_text_sample.jsonl.gz")
    fresh.add_argument("--dev", default="../shared/eval/quality_zh_dev.jsonl.gz")
    fresh.add_argument("--out", required=True)
    speed = sub.add_parser("speed")
    speed.add_argument("--model", required=True)
    speed.add_argument("--data", default="../shared/corpora/real_text_sample.jsonl.gz")
    speed.add_argument("--docs", type=int, default=10000)
    speed.add_argument("--batch-size", type=int, default=256)
    speed.add_argument("--lang", default="en", help="the language the documents are routed as; zh also keeps "
                                                    "only the records of that lang")
    real = sub.add_parser("real-text", help="real-text guard: share of real English text judged low quality")
    real.add_argument("--data", default="../shared/corpora/real_text_sample.jsonl.gz")
    real.add_argument("--demo", default="data/demo/corpus.jsonl.gz", help="also its English records ('' : none)")
    real.add_argument("--demo-min-chars", type=int, default=1500, help="demo records at least this long")
    real.add_argument("--out", required=True, help="JSON of {id: [source, score]}")
    real.add_argument("--against", help="the same JSON from another checkout: list the verdicts that flip")
    real.add_argument("--threshold", type=float, default=0.5)
    args = parser.parse_args()
    {"accuracy": _accuracy, "pipeline": _pipeline, "speed": _speed, "fresh-zh": _fresh_zh,
     "real-text": _real_text}[args.what](args)


if __name__ == "__main__":
    main()
