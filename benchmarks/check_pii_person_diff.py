"""Guard against masking ordinary text: every PERSON span a name-rule change adds on real corpora, for reading.

    PYTHONPATH=. .venv/bin/python benchmarks/check_pii_person_diff.py --base-root ../main [--real-every 4]

Runs the PII step's engine (``PiiEngine(PiiConfig(entities=["PERSON"]))``, spaCy NER where installed, as the
pipeline runs it) over the demo corpus (``configs/demo.yaml``'s input, every record) and over every
``--real-every``-th record of the real-text sample (``../shared/corpora/real_text_sample.jsonl.gz``, English
and Chinese), once with the code under ``--base-root`` (for example the main checkout) and once with this
checkout's code, each in its own process (``PYTHONPATH`` set to that root). It prints every span that is new in
this checkout (not the same start and end in the base) with its source, the span text and some context around
it, and counts of new and dropped spans. Reading them is the point: a new span that is not a person's name is a
false positive of the new rule. ``--dump OUT`` alone writes this code's spans (what each side runs).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo" / "corpus.jsonl.gz"
# ../shared beside the checkout (a clone, the main checkout), or beside the folder of worktrees
REAL = next((p / "shared" / "corpora" / "real_text_sample.jsonl.gz" for p in (REPO.parent, REPO.parent.parent)
             if (p / "shared").is_dir()), REPO.parent / "shared" / "corpora" / "real_text_sample.jsonl.gz")


def documents(real_path: Path, real_every: int) -> list[tuple[str, str]]:
    """(key, text): every demo record, and every ``real_every``-th record of the real-text sample."""
    docs = []
    with gzip.open(DEMO, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            rec = json.loads(line)
            docs.append((f"demo/{rec.get('source')}/{i}", rec["text"]))
    if real_every > 0 and real_path.exists():
        with gzip.open(real_path, "rt", encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i % real_every == 0:
                    rec = json.loads(line)
                    docs.append((f"real/{rec.get('source')}/{i}", rec["text"]))
    return docs


def dump(out: Path, real_path: Path, real_every: int) -> None:
    from transforms.pii import PiiConfig
    from transforms.pii.step import PiiEngine

    docs = documents(real_path, real_every)
    eng = PiiEngine(PiiConfig(entities=["PERSON"]))
    with open(out, "w", encoding="utf-8") as f:
        for lo in range(0, len(docs), 64):
            batch = docs[lo:lo + 64]
            for (key, _), spans in zip(batch, eng.analyze([t for _, t in batch])):
                f.write(json.dumps({"key": key, "engine": eng.ner_engine,
                                    "spans": [[s.start, s.end] for s in spans if s.entity_type == "PERSON"]}) + "\n")


def run_side(root: Path, out: Path, real_path: Path, real_every: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(root)}
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--dump", str(out), "--real", str(real_path),
                    "--real-every", str(real_every), "--code-root", str(root)], env=env, check=True, cwd=root)


def load(path: Path) -> dict[str, set[tuple[int, int]]]:
    with open(path, encoding="utf-8") as f:
        return {r["key"]: {tuple(s) for s in r["spans"]} for r in map(json.loads, f)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-root", type=Path, help="checkout whose code is the baseline (e.g. the main checkout)")
    ap.add_argument("--real", type=Path, default=REAL)
    ap.add_argument("--real-every", type=int, default=4, help="take every n-th real-text record (0: none)")
    ap.add_argument("--dump", type=Path, help="only write this code's PERSON spans to this file")
    ap.add_argument("--base-spans", type=Path, help="reuse a --dump of the baseline's spans instead of --base-root")
    ap.add_argument("--code-root", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--context", type=int, default=40)
    args = ap.parse_args(argv)
    if args.dump:
        dump(args.dump, args.real, args.real_every)
        return 0
    if args.base_root is None and args.base_spans is None:
        ap.error("--base-root or --base-spans is required (or --dump)")
    with tempfile.TemporaryDirectory() as tmp:
        base_out, new_out = args.base_spans or Path(tmp) / "base.jsonl", Path(tmp) / "new.jsonl"
        if args.base_spans is None:
            run_side(args.base_root.resolve(), base_out, args.real, args.real_every)
        run_side(REPO, new_out, args.real, args.real_every)
        base, new = load(base_out), load(new_out)
    texts = dict(documents(args.real, args.real_every))
    added, dropped = Counter(), Counter()
    for key, spans in new.items():
        text = texts[key]
        for s, e in sorted(spans - base.get(key, set())):
            added[key.split("/")[0]] += 1
            ctx = text[max(0, s - args.context):s] + "[[" + text[s:e] + "]]" + text[e:e + args.context]
            print(f"NEW {key} {text[s:e]!r} :: {ctx!r}")
        for s, e in sorted(base.get(key, set()) - spans):
            dropped[key.split("/")[0]] += 1
            print(f"GONE {key} {text[s:e]!r}")
    print(f"documents: {len(new)}; new spans: {sum(added.values())} {dict(added)}; spans gone: "
          f"{sum(dropped.values())} {dict(dropped)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
