"""Rebuild data/demo/corpus.jsonl.gz from the real-text sample in ../shared/corpora (deterministic).

The demo corpus is a slice of real third-party text chosen so that every cleaning step has work to do:
natural near-duplicates (one pydoc topic across CPython versions, gcloud pages in GA/beta/alpha tracks,
Debian constitution versions, licence texts), natural exact duplicates, junk (dictionary entries, word
lists, man pages, changelog-like text), real e-mail addresses (newsgroup posts) and Chinese text.
Each record keeps its source licence. Usage: python data/demo/build_demo_corpus.py [SAMPLE.jsonl.gz]
"""
from __future__ import annotations

import gzip
import json
import random
import sys
from collections import defaultdict
from pathlib import Path

# source -> how many records to take; sources whose licences are public-domain or permissive first.
QUOTA = {
    "austen": 12, "kjv_bible": 20, "jargon": 120, "devil": 120, "fortunes_en": 150, "gcide": 120,
    "wordnet_gloss": 120, "lee_news_gensim": 60, "enwiki_gensim": 12, "newsgroup_gensim": 60,
    "python311_docs": 16, "manpages_en": 20, "debian_copyright": 50, "debian_faq": 5,
    "debian_handbook": 16, "debian_handbook_zh": 24, "debian_faq_zh": 8, "linux_doc_zh": 30,
    "fortunes_zh": 120, "reviews_zh": 250, "manpages_zh": 20,
}
# Families of natural near-duplicates are taken whole so that the dedup step sees them together.
PYDOC_TOPICS = ("identifiers", "strings", "exec", "debugger", "specialnames", "shifting")
GCLOUD_PREFIXES = ("gcloud_compute_", "gcloud_beta_compute_", "gcloud_alpha_compute_")
MAX_CHARS = 60_000


def build(sample_path: Path, out_path: Path) -> None:
    by_source: dict[str, list[dict]] = defaultdict(list)
    with gzip.open(sample_path, "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            by_source[rec["source"]].append(rec)
    rng = random.Random(20261201)
    chosen: list[dict] = []
    for source, quota in QUOTA.items():
        recs = sorted(by_source[source], key=lambda r: r["id"])
        chosen += rng.sample(recs, min(quota, len(recs)))
    chosen += [r for r in by_source["pydoc_topics"] if r["id"].rsplit("/", 1)[-1] in PYDOC_TOPICS]
    gcloud = sorted((r for r in by_source["gcloud_man"] if r["id"].split("/")[-1].startswith(GCLOUD_PREFIXES)),
                    key=lambda r: r["id"])
    chosen += gcloud[:60]
    chosen += [r for r in by_source["doc_debian"] if "constitution" in r["id"] or "social-contract" in r["id"]]
    chosen = [r for r in chosen if len(r["text"]) <= MAX_CHARS]
    # Mirrors re-deliver documents: a few records arrive twice under another URL, as crawls do.
    redelivered = [dict(r, id=r["id"] + "#mirror") for r in rng.sample(chosen, 25)]
    records = sorted(chosen + redelivered, key=lambda r: r["id"])
    rng.shuffle(records)
    with gzip.GzipFile(out_path, "wb", mtime=0) as gz:
        for r in records:
            out = {"url": "corpus://" + r["id"], "source": r["source"], "lang": r["lang"], "title": r["title"],
                   "text": r["text"], "licence": r["licence"]}
            gz.write((json.dumps(out, ensure_ascii=False) + "\n").encode("utf-8"))
    chars = sum(len(r["text"]) for r in records)
    print(f"wrote {len(records)} records, {chars / 1e6:.2f} M characters to {out_path}")


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    sample = Path(sys.argv[1]) if len(sys.argv) > 1 else here.parents[1] / ".." / "shared" / "corpora" / "real_text_sample.jsonl.gz"
    build(sample, here / "corpus.jsonl.gz")
