"""Build quality_zh_train.jsonl.gz: labelled Chinese text for the default Chinese quality model (see README.md).

    python data/quality/build_zh_subset.py ../shared/corpora/real_text_sample.jsonl.gz \
        data/quality/quality_zh_train.jsonl.gz --exclude-groups ../shared/eval/quality_zh_dev.jsonl.gz

Real text only, with the licence of every record: the Chinese documents of the project's real-text sample whose
licence allows redistribution (People's Daily, "research use", is left out, as the English subset leaves out
its research-only news). Documents that are a ``group`` of the given evaluation files are left out too, so that
the shipped model can be measured on those sets without having seen a single sentence of their documents.

From each document: high-quality passages (runs of prose paragraphs, 150-900 characters), and its real
low-quality parts (tables of contents, code and command dumps); synthetic low-quality text is made from the same
passages by ``transforms.quality.synth_zh`` (word salad, Markov babble, keyword spam, character noise,
mojibake). ``group`` is the source document: whole documents go to one side of any split. Deterministic.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from runio.files import atomic_path  # noqa: E402
from transforms.normalize import NormalizeConfig, normalize_text  # noqa: E402
from transforms.quality import synth_zh  # noqa: E402
from transforms.text_units import cjk_ratio  # noqa: E402

SEED = "corpusmill-quality-zh-v1"
# sources whose licence allows redistribution (see SOURCES.tsv of the real-text sample)
SOURCES = ("linux_doc_zh", "debian_handbook_zh", "debian_reference_zh", "debian_faq_zh", "manpages_zh",
           "reviews_zh", "fortunes_zh")
EXCLUDED_SOURCES = {"peoples_daily_zh": "People's Daily 1998: research use only"}
FIELDS = ("id", "text", "label", "subtype", "source", "group", "rule", "licence")
PASSAGES_PER_DOC = 8  # at most, and one per PASSAGE_CHARS of the document
PASSAGE_CHARS = 1000
SHORT_DOCS = {"reviews_zh": 250, "fortunes_zh": 150}  # a review or a poem is one passage; at most this many
# target records per low-quality class (synthetic ones are drawn from the high-quality passages)
SYNTHETIC_PER_CLASS = 260
MAX_REAL_PER_DOC = 2
DIGEST_SHARE = 0.15  # share of the documents reserved for digest pages
DIGESTS = {"reviews_zh": 120, "fortunes_zh": 60, "prose": 120}  # digest pages of each kind
MARKOV_CHARS_PER_DOC = 20_000  # text of each document the Markov chain is built from

# a numbered heading: "14.3.4. 侦测变化", "2. 工具", "A.1. Debian 迷宫", "第 13 章 ...", "三、..."
_TOC_LINE_RE = re.compile(r"^\s*(\d+(\.\d+)+\.?|\d+\.|[A-Z](\.\d+)+\.?|第\s*[0-9一二三四五六七八九十百]+\s*[章节部分]|"
                          r"[一二三四五六七八九十]+、)\s*[^\d\s].{0,70}$")
_CODE_CHARS_RE = re.compile(r"[{}();=<>$#/\\|\[\]_*&%@~`-]")
_SENTENCE_END = ("。", "！", "？", "：", "；", "）", "”", "」", ".", ":")


def stable_u(*parts: str) -> float:
    digest = hashlib.blake2b("\x00".join((SEED,) + parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def is_code_line(line: str) -> bool:
    s = line.strip()
    if not s or cjk_ratio(s) > 0.1:
        return False
    ascii_share = sum(c.isascii() for c in s) / len(s)
    return ascii_share > 0.95 and (len(_CODE_CHARS_RE.findall(s)) >= 2 or s.startswith(("$ ", "# ")))


def is_prose_paragraph(par: str) -> bool:
    s = par.strip()
    if len(s) < 8 or _TOC_LINE_RE.match(s) or is_code_line(s):
        return False
    return cjk_ratio(s) >= 0.5


def prose_passages(text: str, rng: random.Random) -> list[str]:
    """Runs of consecutive prose paragraphs (short headings between them included), 150-900 characters."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n|\n(?=\S)", text) if p.strip()]
    passages: list[str] = []
    current: list[str] = []
    target = rng.randint(200, 900)

    def flush():
        nonlocal current, target
        body = "\n".join(current)
        if len(body) >= 150 and cjk_ratio(body) >= 0.5 and sum(
                len(p) for p in current if p.endswith(_SENTENCE_END)) >= 0.6 * len(body):
            passages.append(body[:target + 100])
        current = []
        target = rng.randint(200, 900)

    for par in paragraphs:
        if is_prose_paragraph(par) or (current and len(par) <= 30 and not is_code_line(par)):
            current.append(par)
            if sum(map(len, current)) >= target:
                flush()
        elif current:
            flush()
    if current:
        flush()
    return passages


def real_runs(text: str, kind: str) -> list[str]:
    """Runs of >= 4 consecutive lines that are table-of-contents entries (``toc``) or code (``code``)."""
    test = (lambda line: bool(_TOC_LINE_RE.match(line))) if kind == "toc" else is_code_line
    runs, current = [], []
    for line in text.split("\n"):
        if line.strip() and test(line):
            current.append(line.rstrip())
            continue
        if not line.strip() and current and kind == "code":
            continue  # blank lines inside a code block
        if len(current) >= 4:
            runs.append("\n".join(current))
        current = []
    if len(current) >= 4:
        runs.append("\n".join(current))
    out = []
    for run in runs:  # cut long runs into documents of at most ~1,200 characters
        lines, piece = run.split("\n"), []
        for line in lines:
            piece.append(line)
            if sum(map(len, piece)) >= 1200:
                out.append("\n".join(piece))
                piece = []
        if len(piece) >= 4:
            out.append("\n".join(piece))
    return [r for r in out if len(r) >= 80]


def headings(text: str, rng: random.Random) -> list[str]:
    """The document's numbered headings, in order, as tables of contents of 4-15 lines (how a table of contents
    is made); none when it has fewer than 4."""
    lines = [line.strip() for line in text.split("\n") if _TOC_LINE_RE.match(line) and len(line.strip()) <= 80]
    out, start = [], 0
    while len(lines) - start >= 4:
        n = rng.randint(4, 15)
        out.append("\n".join(lines[start:start + n]))
        start += n
    return out


def digests(digest_docs: dict[str, list[dict]], rng: random.Random) -> list[dict]:
    """High-quality "digest pages": whole real items one after another, as on a page of reviews, an anthology
    or a news digest: 3-8 reviews, 2-5 poems, or one prose passage from each of 2-4 documents. The topic changes
    at item boundaries, never inside a sentence (which is what a Markov chain does). Group: the page."""
    out = []
    plans = (("reviews_zh", 3, 8, DIGESTS["reviews_zh"]), ("fortunes_zh", 2, 5, DIGESTS["fortunes_zh"]),
             ("prose", 2, 4, DIGESTS["prose"]))
    for key, low, high, count in plans:
        pool = [d for d in digest_docs[key] if cjk_ratio(d["text"]) >= 0.5]
        if key == "prose":
            pool = [(d, p) for d in pool for p in prose_passages(d["text"], rng)[:2]]
        else:
            pool = [(d, d["text"]) for d in pool if 15 <= len(d["text"]) <= 600]
        if len(pool) < high:
            continue
        for k in range(count):
            items = rng.sample(pool, rng.randint(low, high))
            if key == "prose":
                items = [(d, p[: rng.randint(120, 400)]) for d, p in items]
                items = [(d, p[: max(p.rfind("。"), 60) + 1]) for d, p in items]
            text = "\n".join(p for _, p in items)
            group = f"digest:{key}:{k}"
            rec = _record({"group": group, "source": items[0][0]["source"],
                           "licence": "; ".join(sorted({d["licence"] for d, _ in items}))},
                          text, "hq", "edited_prose", "a digest page: whole real items of several documents in a row")
            rec["derived_from"] = [d["group"] for d, _ in items]
            out.append(rec)
    return out


def load_excluded_groups(paths: list[str]) -> set[str]:
    groups: set[str] = set()
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                groups.add(json.loads(line)["group"])
    return groups


def build(sample_path: str, exclude: list[str]) -> list[dict]:
    excluded = load_excluded_groups(exclude)
    cfg = NormalizeConfig()
    docs = []
    with gzip.open(sample_path, "rt", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            group = f"{r['source']}:{r['id']}"
            if r.get("lang") == "zh" and r["source"] in SOURCES and group not in excluded:
                docs.append({**r, "group": group, "text": normalize_text(r["text"], cfg)})
    docs.sort(key=lambda d: d["group"])
    rng = random.Random(SEED)
    records: list[dict] = []
    passages: list[tuple[dict, str]] = []  # (doc, passage) for the synthetic classes
    short_seen: Counter = Counter()
    digest_docs: dict[str, list[dict]] = {"reviews_zh": [], "fortunes_zh": [], "prose": []}
    for doc in docs:
        if stable_u("digest", doc["group"]) < DIGEST_SHARE:
            # reserved for digest pages (see below): used nowhere else, so no document straddles two groups
            key = doc["source"] if doc["source"] in SHORT_DOCS else "prose"
            digest_docs[key].append(doc)
            continue
        if doc["source"] in SHORT_DOCS:
            # short documents: a review or a poem is a passage of its own
            if len(doc["text"]) >= 60 and cjk_ratio(doc["text"]) >= 0.5 and \
                    short_seen[doc["source"]] < SHORT_DOCS[doc["source"]] and stable_u(doc["group"]) < 0.6:
                short_seen[doc["source"]] += 1
                passages.append((doc, doc["text"]))
            continue
        found = prose_passages(doc["text"], rng)
        rng.shuffle(found)
        for passage in found[:min(PASSAGES_PER_DOC, 1 + len(doc["text"]) // PASSAGE_CHARS)]:
            passages.append((doc, passage))
        for run in real_runs(doc["text"], "code")[:MAX_REAL_PER_DOC]:
            records.append(_record(doc, run, "lq", "code_dump", "real code and command lines of the document"))
        for run in (real_runs(doc["text"], "toc") or headings(doc["text"], rng))[:MAX_REAL_PER_DOC]:
            records.append(_record(doc, run, "lq", "table_of_contents",
                                   "real table-of-contents lines, or the document's own numbered headings in order"))
    # every passage is a high-quality example; the synthetic classes are made from a sample of them
    for doc, passage in passages:
        records.append(_record(doc, passage, "hq", "edited_prose", "runs of prose paragraphs of an edited document"))
    records.extend(digests(digest_docs, rng))
    long_passages = [(d, p) for d, p in passages if len(p) >= 150]
    chars, weights = synth_zh.char_distribution([p for _, p in long_passages])
    doc_of = {d["group"]: d for d, _ in long_passages}
    pool_groups = sorted(doc_of)
    for subtype in synth_zh.SUBTYPES:
        picks = rng.sample(long_passages, min(SYNTHETIC_PER_CLASS, len(long_passages)))
        for doc, passage in picks:
            sub_rng = random.Random(f"{SEED}\x00{subtype}\x00{doc['group']}\x00{passage[:50]}")
            sources = [doc]
            if subtype == "word_salad":
                text, rule = synth_zh.word_salad(passage, sub_rng), "jieba words of a real passage, shuffled"
            elif subtype == "markov_babble":
                if sub_rng.random() < 0.7:
                    others = sub_rng.sample([g for g in pool_groups if g != doc["group"]], sub_rng.randint(3, 8))
                    sources = [doc_of[g] for g in others]
                    rule = "order-1 word Markov chain over other documents"
                else:
                    rule = "order-1 word Markov chain over this document"
                pool = [d["text"][:MARKOV_CHARS_PER_DOC] for d in sources]
                text = synth_zh.markov_babble(pool, len(passage), sub_rng)
            elif subtype == "keyword_spam":
                text, rule = synth_zh.keyword_spam(passage, sub_rng), "keywords of a real passage, repeated"
            elif subtype == "char_noise":
                text, rule = synth_zh.char_noise(passage, chars, weights, sub_rng), "random characters"
            else:
                text, rule = synth_zh.mojibake(passage, sub_rng), "UTF-8 bytes of a real passage read as a legacy codec"
            text = text.strip()
            if len(text) < 40:
                continue
            rec = _record(doc, text, "lq", subtype, rule, synthetic=True)
            if len(sources) > 1:
                rec["licence"] = "; ".join(sorted({d["licence"] for d in sources}))
                rec["derived_from"] = [d["group"] for d in sources]
            records.append(rec)
    records.sort(key=lambda r: r["id"])
    return records


def _record(doc: dict, text: str, label: str, subtype: str, rule: str, synthetic: bool = False) -> dict:
    digest = hashlib.blake2b(f"{doc['group']}\x00{subtype}\x00{text}".encode("utf-8"), digest_size=6).hexdigest()
    return {"id": f"zh-{digest}", "text": text, "label": label, "subtype": subtype,
            "source": "synthetic_from_real" if synthetic else doc["source"], "group": doc["group"], "rule": rule,
            "licence": doc["licence"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sample", help="the real-text sample (JSONL.gz with id, source, lang, text, licence)")
    parser.add_argument("out", help="output JSONL.gz")
    parser.add_argument("--exclude-groups", nargs="*", default=[],
                        help="labelled JSONL.gz files whose `group`s (source documents) are left out")
    args = parser.parse_args(argv)
    records = build(args.sample, args.exclude_groups)
    seen = set()
    with atomic_path(args.out) as tmp, gzip.GzipFile(tmp, "wb", compresslevel=9, mtime=0) as raw:
        for rec in records:
            if rec["id"] in seen:
                continue
            seen.add(rec["id"])
            raw.write((json.dumps({k: rec[k] for k in FIELDS + ("derived_from",) if k in rec},
                                  ensure_ascii=False) + "\n").encode("utf-8"))
    counts = Counter((r["label"], r["subtype"]) for r in records)
    for (label, subtype), n in sorted(counts.items()):
        print(f"{label}\t{subtype}\t{n}")
    print(f"total\t{len(seen)}\tgroups\t{len({r['group'] for r in records})}")
    print(Counter(r["source"] for r in records if r["label"] == "hq"))


if __name__ == "__main__":
    main()
