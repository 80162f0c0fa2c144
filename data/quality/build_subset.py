"""Rebuild quality_train_subset.jsonl.gz from the project's labelled set (see README.md in this folder).

    python data/quality/build_subset.py ../shared/eval/quality_train.jsonl.gz data/quality/quality_train_subset.jsonl.gz

Whole source documents (``group``) are kept or dropped together, by a hash of the group, so the subset's own
group-disjoint held-out split stays meaningful. Records whose source has no clear redistribution licence are
dropped (see EXCLUDED_SOURCES).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import sys
from collections import Counter

KEEP_GROUP_FRACTION = 0.5
SELECTION_SEED = "corpusmill-quality-subset-v1"
# Lee et al. news corpus: ABC news articles distributed for research use only.
EXCLUDED_SOURCES = {"lee_news_gensim"}
FIELDS = ("id", "text", "label", "subtype", "source", "group", "rule")


def keep_group(group: str) -> bool:
    digest = hashlib.blake2b(f"{SELECTION_SEED}\x00{group}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < KEEP_GROUP_FRACTION


def main(src: str, dst: str) -> None:
    kept: Counter[tuple[str, str]] = Counter()
    with gzip.open(src, "rt", encoding="utf-8") as fin, gzip.open(dst, "wt", encoding="utf-8", compresslevel=9) as fout:
        for line in fin:
            record = json.loads(line)
            if record["source"] in EXCLUDED_SOURCES or not keep_group(record["group"]):
                continue
            fout.write(json.dumps({k: record[k] for k in FIELDS}, ensure_ascii=False) + "\n")
            kept[(record["label"], record["subtype"])] += 1
    for (label, subtype), n in sorted(kept.items()):
        print(f"{label}\t{subtype}\t{n}")
    print(f"total\t{sum(kept.values())}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
