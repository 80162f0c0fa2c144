"""The text-ness judge (``transforms.quality.textness``): fit it on the probe's tune split, measure it on the
measure split (sources disjoint: see data/quality/build_textness_probe.py).

    .venv/bin/python benchmarks/bench_textness.py fit        # writes data/quality/textness_judge.json
    .venv/bin/python benchmarks/bench_textness.py measure    # accuracy by kind and language, speed
    .venv/bin/python benchmarks/bench_textness.py long [--handbook DIR]   # long real documents kept

Texts are normalized first, as the pipeline's normalize step does before the quality step.
measure: accuracy at the default threshold (``quality.textness_threshold``), overall, per garbage kind, real text
per language; and docs per CPU-second of ``TextnessJudge.score`` (process CPU time) on the measure split.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "data/quality/textness_probe.jsonl.gz")


def _load(path: str, split: str) -> list[dict]:
    """The split's records, their text normalized as the pipeline's normalize step does before quality runs (it
    removes the C1 control characters UTF-8 read as Latin-1 leaves, for one)."""
    from transforms.normalize import NormalizeConfig, normalize_text

    cfg = NormalizeConfig()
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [{**r, "text": normalize_text(r["text"], cfg)} for r in map(json.loads, fh) if r["split"] == split]


def _fit(args) -> None:
    from transforms.quality.textness import DEFAULT_JUDGE, fit_textness_judge

    records = _load(args.probe, "tune")
    judge = fit_textness_judge([r["text"] for r in records], [r["label"] == "real" for r in records], l2=args.l2,
                               meta={"fitted_on": "data/quality/textness_probe.jsonl.gz, split tune "
                                                  f"({len(records)} records)", "l2": args.l2})
    out = args.out or os.path.join(ROOT, DEFAULT_JUDGE)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(judge.to_json(), fh, indent=1)
        fh.write("\n")
    score = judge.score([r["text"] for r in records])
    truth = np.array([r["label"] == "real" for r in records])
    print(f"fitted on {len(records)} tune records: tune accuracy {((score >= 0.5) == truth).mean():.4f} -> {out}")


def _measure(args) -> None:
    from transforms.quality.step import QualityConfig
    from transforms.quality.textness import TextnessJudge

    threshold = QualityConfig().textness_threshold
    judge = TextnessJudge.load(args.judge)
    for split in args.splits.split(","):
        records = _load(args.probe, split)
        texts = [r["text"] for r in records]
        judge.score(texts[:50])  # warm
        cpu = time.process_time()
        score = judge.score(texts)
        cpu = time.process_time() - cpu
        truth = np.array([r["label"] == "real" for r in records])
        right = (score >= threshold) == truth
        groups = defaultdict(list)
        for r, ok in zip(records, right):
            groups[r["kind"] if r["label"] == "garbage" else f"real {r['lang']}"].append(ok)
        print(f"split {split}: {len(records)} records, accuracy {right.mean():.4f} (real {right[truth].mean():.4f}, "
              f"garbage {right[~truth].mean():.4f}); {len(records) / cpu:,.0f} docs/CPU-s")
        unmodelled = [ok for r, ok in zip(records, right) if r["label"] == "real" and r["lang"] not in ("en", "zh")]
        print(f"  real text in the languages without a quality model: {np.mean(unmodelled):.4f} "
              f"({len(unmodelled)} passages)")
        for key in sorted(groups):
            print(f"  {key:<16}{len(groups[key]):>5}  {np.mean(groups[key]):.3f}")
        if args.show_errors:
            for r, ok, s in zip(records, right, score):
                if not ok:
                    print(f"  MISS {r['kind']} {r['lang']} {s:.3f}: {r['text'][:160]!r}")


def _handbook_passages(root: str, per_lang: int, seed: int) -> list[tuple[str, str]]:
    """(language, passage) from the Debian Administrator's Handbook's HTML: consecutive paragraphs
    (``class="para"``) of about 1,200 characters, ``per_lang`` drawn per translation (en and zh left out: they
    have quality models)."""
    import glob
    import random

    import lxml.html

    rng, out = random.Random(seed), []
    for lang in sorted(os.listdir(root)):
        if lang.startswith(("en", "zh")) or not os.path.isdir(os.path.join(root, lang)):
            continue
        passages, current = [], []
        for path in sorted(glob.glob(os.path.join(root, lang, "*.html"))):
            for para in lxml.html.parse(path).getroot().xpath('//*[@class="para"]'):
                text = " ".join(para.text_content().split())
                if len(text) > 80:
                    current.append(text)
                if sum(map(len, current)) > 1200:
                    passages.append("\n".join(current))
                    current = []
        out += [(lang, p) for p in rng.sample(passages, min(per_lang, len(passages)))]
    return out


def _long(args) -> None:
    """Documents longer than the probe's passages, which the judge reads window by window: the demo corpus's long
    documents; long garbage joined from three measure-split garbage passages of one kind and language, and garbage
    after a fluent head (one real measure passage, then three garbage ones); with --handbook, the Debian
    Administrator's Handbook in its 23 translations without a quality model, as paragraph passages and as whole
    pages (``sect.*.html``, six per translation, through corpusmill's extraction) (apt-get download
    debian-handbook && dpkg-deb -x debian-handbook_*.deb DIR; then --handbook DIR/usr/share/doc/debian-handbook/html).
    The share of each group the judge passes."""
    from transforms.normalize import NormalizeConfig, normalize_text
    from transforms.quality.step import QualityConfig
    from transforms.quality.textness import HEAD_CHARS, TextnessJudge

    threshold = QualityConfig().textness_threshold
    judge = TextnessJudge.load(args.judge)
    with gzip.open(os.path.join(ROOT, "data/demo/corpus.jsonl.gz"), "rt", encoding="utf-8") as fh:
        docs = [(r["source"], r["text"]) for r in map(json.loads, fh) if len(r["text"]) > HEAD_CHARS]
    docs += _long_garbage(HEAD_CHARS)
    if args.handbook:
        docs += [(f"handbook {lang}", text) for lang, text in _handbook_passages(args.handbook, 30, 0)]
        docs += [("handbook whole pages", text) for text in _handbook_pages(args.handbook, 6, 0)]
    cfg = NormalizeConfig()
    scores = judge.score([normalize_text(text, cfg) for _, text in docs])
    groups = defaultdict(list)
    for (source, _), score in zip(docs, scores):
        groups[source].append(score >= threshold)
        if not source.startswith(("probe", "handbook whole")):
            groups["handbook, all" if source.startswith("handbook") else "demo, all"].append(score >= threshold)
    for key in sorted(groups):
        print(f"  {key:<38}{len(groups[key]):>5}  {np.mean(groups[key]):.3f}")


def _long_garbage(longer_than: int) -> list[tuple[str, str]]:
    """Long garbage from the probe's measure split (passed: wrong): three passages of one garbage kind and language
    joined; and a real passage followed by three garbage passages drawn at random (garbage after a fluent head)."""
    import random

    records = _load(PROBE, "measure")
    by_kind = defaultdict(list)
    for r in records:
        by_kind[(r["kind"], r["lang"])].append(r["text"])
    out = [("probe: garbage, 3 passages joined", "\n\n".join(texts[i:i + 3]))
           for (kind, _), texts in sorted(by_kind.items()) if kind != "prose" for i in range(0, len(texts) - 2, 3)]
    rng = random.Random(0)
    real = [r["text"] for r in records if r["kind"] == "prose"]
    garbage = [r["text"] for r in records if r["kind"] != "prose"]
    out += [("probe: garbage after a real passage", "\n\n".join([rng.choice(real)] + rng.sample(garbage, 3)))
            for _ in range(60)]
    return [(group, text) for group, text in out if len(text) > longer_than]


def _handbook_pages(root: str, per_lang: int, seed: int) -> list[str]:
    """Whole section pages of the handbook's translations without a model, as corpusmill extracts them."""
    import glob
    import random

    from transforms.extract.core import extract

    rng, out = random.Random(seed), []
    for lang in sorted(os.listdir(root)):
        if lang.startswith(("en", "zh")) or not os.path.isdir(os.path.join(root, lang)):
            continue
        for path in rng.sample(sorted(glob.glob(os.path.join(root, lang, "sect.*.html"))), per_lang):
            with open(path, encoding="utf-8") as fh:
                out.append(extract(fh.read()).text)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    fit = sub.add_parser("fit")
    fit.add_argument("--probe", default=PROBE)
    fit.add_argument("--l2", type=float, default=1.0)
    fit.add_argument("--out", help="default: the shipped data/quality/textness_judge.json")
    measure = sub.add_parser("measure")
    measure.add_argument("--probe", default=PROBE)
    measure.add_argument("--judge", help="default: the shipped judge")
    measure.add_argument("--splits", default="measure")
    measure.add_argument("--show-errors", action="store_true")
    long = sub.add_parser("long", help="long documents: the demo corpus's, long garbage, the Debian handbook's")
    long.add_argument("--judge", help="default: the shipped judge")
    long.add_argument("--handbook", help="the handbook's html/ folder (one folder per translation)")
    args = parser.parse_args()
    {"fit": _fit, "measure": _measure, "long": _long}[args.what](args)


if __name__ == "__main__":
    main()
