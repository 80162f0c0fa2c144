"""Language identification: accuracy on the real-text sample by script, and throughput, pure core and through Beam.

    .venv/bin/python benchmarks/bench_langid.py accuracy --data ../shared/corpora/real_text_sample.jsonl.gz
    .venv/bin/python benchmarks/bench_langid.py speed --data ../shared/corpora/real_text_sample.jsonl.gz

accuracy: every document, normalized as the pipeline does (``normalize_text``, NFC), its ``lang`` field the truth
(en/zh). Documents are grouped by the share of CJK letters (``cjk_ratio``, whole document): >= 80% CJK, <= 20% CJK
(>= 80% other scripts), mixed in between; each group's accuracy per true language, for the step's defaults and
for plain lid.176 on the first 1,000 characters (the usual way: no script rule, no windows, no lower-casing).
Mixed documents are listed with their dominant-language share.

speed: docs per CPU-second of the process (other load on a shared machine does not count) and per wall-second,
one worker. Core: ``LangIdentifier.identify`` on batches of 512. Beam: FnApiRunner in-process, one worker, two
passes over the documents: read JSONL -> parse -> normalize -> count, against the same with the langid step
(``ApplyStep(LangIdStep)``) after normalize; the step's own rate is docs / (cpu(with) - cpu(without)).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _records(path: str) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _band(ratio: float) -> str:
    return "cjk>=0.8" if ratio >= 0.8 else ("cjk<=0.2" if ratio <= 0.2 else "mixed")


def _accuracy(args) -> None:
    from transforms.langid import LangIdConfig, LangIdentifier
    from transforms.normalize import NormalizeConfig, normalize_text
    from transforms.text_units import cjk_ratio

    records = _records(args.data)
    texts = [normalize_text(r["text"], NormalizeConfig()) for r in records]
    ratios = [cjk_ratio(t) for t in texts]
    ident = LangIdentifier(LangIdConfig())
    ident.setup()
    started = time.process_time()
    results = ident.identify(texts, ratios)
    cpu = time.process_time() - started
    plain = [lab[0][len("__label__"):] for lab in ident.model.predict([t[:1000].replace("\n", " ") for t in texts],
                                                                       k=1)[0]]
    table: dict[tuple[str, str], Counter] = defaultdict(Counter)
    errors: Counter = Counter()
    for rec, res, base, ratio in zip(records, results, plain, ratios):
        cell = table[(rec["lang"], _band(ratio))]
        cell["n"] += 1
        cell["ok"] += res["lang"] == rec["lang"]
        cell["plain_ok"] += base == rec["lang"]
        if res["lang"] != rec["lang"]:
            errors[(rec["lang"], _band(ratio), res["lang"], rec["source"])] += 1
    print(f"{len(records)} documents, identify {len(records) / cpu:,.0f} docs/CPU-s\n")
    print("| true lang | letters | docs | accuracy (step defaults) | plain lid.176, head 1,000 chars |")
    print("|---|---|---|---|---|")
    for (lang, band), c in sorted(table.items()):
        print(f"| {lang} | {band} | {c['n']:,} | **{c['ok'] / c['n']:.4f}** ({c['n'] - c['ok']} wrong) | "
              f"{c['plain_ok'] / c['n']:.4f} |")
    print("\nmost frequent errors (true, letters, predicted, source):")
    for key, n in errors.most_common(15):
        print(f"  {n:4d}  {key}")
    mixed = [(rec, res, ratio) for rec, res, ratio in zip(records, results, ratios) if _band(ratio) == "mixed"]
    if mixed:
        print(f"\nmixed documents ({len(mixed)}): dominant language, second language and its share of letters")
        shares = Counter()
        for rec, res, ratio in mixed:
            shares[(rec["lang"], res["lang"], res["second"])] += 1
        for (truth, lang, second), n in shares.most_common(8):
            sub = [res["second_share"] for rec, res, _ in mixed if (rec["lang"], res["lang"], res["second"]) ==
                   (truth, lang, second)]
            print(f"  true {truth}: labelled {lang}, second {second}: {n} docs, second share median "
                  f"{sorted(sub)[len(sub) // 2]:.2f} (range {min(sub):.2f}-{max(sub):.2f})")


def _timed(fn) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def _speed(args) -> None:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from transforms.beam_step import ApplyStep
    from transforms.langid import LangIdConfig, LangIdentifier, LangIdStep
    from transforms.normalize import NormalizeConfig, NormalizeStep, normalize_text
    from transforms.text_units import cjk_ratio

    records = _records(args.data)
    if args.docs and args.docs < len(records):
        records = [records[int(i * len(records) / args.docs)] for i in range(args.docs)]
    texts = [normalize_text(r["text"], NormalizeConfig()) for r in records]
    ratios = [cjk_ratio(t) for t in texts]
    print(f"{len(texts)} documents, mean {sum(map(len, texts)) / len(texts):.0f} characters")
    cfg = LangIdConfig()
    ident = LangIdentifier(cfg)
    ident.setup()
    rows = {}
    for name in ("core: identify, first pass", "core: identify, second pass"):
        rows[name] = _timed(lambda: [ident.identify(texts[i:i + 512], ratios[i:i + 512])
                                     for i in range(0, len(texts), 512)])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "docs.jsonl")
        with open(path, "w", encoding="utf-8") as fh:
            for i, rec in enumerate(records + records):
                fh.write(json.dumps({"id": i, "text": rec["text"], "source": "bench", "meta": {},
                                     "annotations": {}}, ensure_ascii=False) + "\n")

        def pipeline(with_step: bool):
            options = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
            with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
                docs = (p | beam.io.ReadFromText(path) | "Parse" >> beam.Map(json.loads)
                        | "Normalize" >> ApplyStep(NormalizeStep(NormalizeConfig())))
                docs = docs.kept
                if with_step:
                    docs = (docs | "LangId" >> ApplyStep(LangIdStep(cfg))).kept
                _ = docs | beam.combiners.Count.Globally()

        pipeline(False)  # warm-up
        base = _timed(lambda: pipeline(False))
        step = _timed(lambda: pipeline(True))
    n = 2 * len(records)
    print("\n| measurement (one worker) | docs per CPU-second | docs per wall-second |")
    print("|---|---|---|")
    for name, (cpu, wall) in rows.items():
        print(f"| {name} | {len(texts) / cpu:,.0f} | {len(texts) / wall:,.0f} |")
    print(f"| beam: read+parse+normalize+count (baseline) | {n / base[0]:,.0f} | {n / base[1]:,.0f} |")
    print(f"| beam: read+parse+normalize+**langid**+count | {n / step[0]:,.0f} | {n / step[1]:,.0f} |")
    print(f"| **beam: langid step alone (difference)** | **{n / max(step[0] - base[0], 1e-9):,.0f}** | "
          f"{n / max(step[1] - base[1], 1e-9):,.0f} |")
    best = min(_timed(lambda: sum(range(10**7)))[0] for _ in range(3))
    print(f"\nload indicator: reference loop sum(range(10**7)) {best:.3f} CPU-s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    for name in ("accuracy", "speed"):
        p = sub.add_parser(name)
        p.add_argument("--data", default="../shared/corpora/real_text_sample.jsonl.gz")
        if name == "speed":
            p.add_argument("--docs", type=int, default=0, help="evenly spaced subset (0: all)")
    args = parser.parse_args()
    {"accuracy": _accuracy, "speed": _speed}[args.what](args)


if __name__ == "__main__":
    main()
