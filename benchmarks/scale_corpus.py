"""Grow a real corpus to N× its size for the scale benchmark (``bench_scale.py``) without identical repeats.

A grown corpus of ``target_bytes`` (UTF-8 text bytes) is, by a fixed share, made of

- **fresh real text**: the base corpus's documents (in one seeded order, so the 1× corpus is a prefix of the 4×
  and the 4× of the 16×), then other real text of this machine — Debian package documentation
  (``/usr/share/doc``: changelogs, copyright files, READMEs, NEWS), man pages (troff requests and escapes
  stripped) and the documentation files of the installed Python packages — the same kinds of sources as the
  shared sample, in other versions;
- **edited copies** of documents already in the corpus: word-level edits (each word deleted, replaced by a word
  of another document, or followed by an inserted word, at a rate drawn per copy from ``EDIT_RATES``; for
  CJK text the same per character), so some copies stay near-duplicates of their original and some do not.

Exact repeats are never written: a document whose text hash was already emitted is skipped. Every size has the
same mix (``fresh_share`` fresh, the rest edited copies), so the per-MB cost of each stage is comparable across
sizes. The output is split into ``files`` JSONL.gz files (a file is read by one worker).
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import re
from pathlib import Path
from typing import Iterator

EDIT_RATES = (0.01, 0.03, 0.05, 0.1, 0.2, 0.35)  # per copy: near-duplicates at the low rates, new text at the high
HOST_ROOTS = ("/usr/share/doc", "/usr/share/man", "/usr/share/info")
HOST_DOC_SUFFIXES = (".txt", ".md", ".rst", "")
MAX_DOC_BYTES = 400_000
MIN_DOC_BYTES = 200
_WORD = re.compile(r"\S+|\s+")
_CJK = re.compile(r"[\u3400-\u9fff]")
_TROFF_ESCAPE = re.compile(r"\\f[BIRPCW1-4]|\\f\(..|\\\(..|\\\*\(..|\\\*.|\\s[+-]?\d|\\[&|^~%]|\\e")


def read_jsonl(path: str) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _strip_troff(text: str) -> str:
    out = []
    for line in text.splitlines():
        if line.startswith((".", "'")):
            words = line.split(None, 1)
            if len(words) == 2 and words[0] in (".SH", ".SS", ".B", ".I", ".BR", ".IR", ".BI", ".IB", ".RB"):
                out.append(words[1].replace('"', ""))
            continue
        out.append(_TROFF_ESCAPE.sub("", line).replace("\\-", "-").replace("\\\\", "\\"))
    return "\n".join(out)


def _read_text_file(path: Path) -> str | None:
    try:
        raw = gzip.open(path).read(MAX_DOC_BYTES * 4) if path.suffix == ".gz" else path.read_bytes()[:MAX_DOC_BYTES * 4]
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if b"\0" in raw[:4096]:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "/man/" in str(path):
        text = _strip_troff(text)
    text = text[:MAX_DOC_BYTES]
    return text if len(text.encode()) >= MIN_DOC_BYTES else None


def host_documents(roots: tuple[str, ...] = HOST_ROOTS, site_packages: str | None = None) -> Iterator[dict]:
    """Real text of this machine, one document per file, in sorted path order (deterministic)."""
    dirs = [Path(r) for r in roots if Path(r).is_dir()]
    if site_packages and Path(site_packages).is_dir():
        dirs.append(Path(site_packages))
    for root in dirs:
        is_site = root == Path(site_packages or "")
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                path = Path(dirpath) / name
                if path.is_symlink():
                    continue
                base = name[:-3] if name.endswith(".gz") else name
                if is_site:
                    if not (base.endswith((".md", ".rst", ".txt")) or base == "METADATA"):
                        continue
                elif "/man/" not in dirpath and Path(base).suffix not in HOST_DOC_SUFFIXES:
                    continue
                text = _read_text_file(path)
                if text is None:
                    continue
                source = ("host_man" if "/man/" in dirpath else "host_pypkg_docs" if is_site
                          else "host_debian_doc")
                # a site-packages file is named from the site-packages folder on: the virtual environment's own
                # path (a checkout's .venv) would otherwise change the corpus bytes, hence every document id
                name_in_id = f"/site-packages/{path.relative_to(root)}" if is_site else str(path)
                yield {"id": f"host{name_in_id}", "source": source,
                       "lang": "zh" if len(_CJK.findall(text[:2000])) > 200 else "en",
                       "title": name, "text": text, "licence": "each file under its own package's terms"}


def edit_text(text: str, rate: float, rng: random.Random, vocabulary: list[str]) -> str:
    """``text`` with words (characters, for CJK text) deleted, replaced or followed by an insertion at ``rate``;
    at least one edit, so the copy is never identical."""
    cjk = len(_CJK.findall(text[:2000])) > 100
    units = list(text) if cjk else _WORD.findall(text)
    out, edited = [], False
    for unit in units:
        if unit.isspace() or rng.random() >= rate:
            out.append(unit)
            continue
        edited = True
        op = rng.random()
        filler = rng.choice(vocabulary)
        filler = filler[:1] if cjk else filler
        if op < 1 / 3:
            continue  # deleted
        out.append(filler if op < 2 / 3 else unit + ("" if cjk else " ") + filler)
    if not edited:
        out.append(("" if cjk else " ") + rng.choice(vocabulary))
    return "".join(out)


def _text_hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def grow(base_docs: list[dict], target_bytes: int, *, fresh_share: float = 0.75, seed: int = 0,
         extra_docs: Iterator[dict] | None = None) -> list[dict]:
    """Documents holding about ``target_bytes`` UTF-8 text bytes: fresh real text (``base_docs`` in a seeded
    order, then ``extra_docs``) up to ``fresh_share`` of it, edited copies of those for the rest. No two
    documents have the same text or the same id."""
    order = list(base_docs)
    random.Random(seed).shuffle(order)
    fresh_iter = iter(order + [])
    extra = iter(extra_docs or ())
    seen: set[bytes] = set()
    out: list[dict] = []
    size = 0

    def take_fresh() -> dict | None:
        for doc in fresh_iter:
            return doc
        for doc in extra:
            return doc
        return None

    while size < target_bytes * fresh_share:
        doc = take_fresh()
        if doc is None:
            break
        h = _text_hash(doc["text"])
        if h in seen:
            continue
        seen.add(h)
        out.append(doc)
        size += len(doc["text"].encode())
    if not out:
        raise ValueError("no fresh documents to grow from")
    rng = random.Random(seed + 1)
    vocabulary = [w for d in out[:200] for w in d["text"].split()[:200]] or ["word"]
    originals = list(out)
    copies = 0
    while size < target_bytes:
        doc = rng.choice(originals)
        text = edit_text(doc["text"], rng.choice(EDIT_RATES), rng, vocabulary)
        h = _text_hash(text)
        if h in seen:
            continue
        seen.add(h)
        copies += 1
        out.append({**doc, "id": f"{doc['id']}~edit{copies}", "text": text})
        size += len(text.encode())
    return out


def write_corpus(docs: list[dict], out_dir: str, files: int) -> list[str]:
    """``docs`` round-robin into ``files`` JSONL.gz files under ``out_dir``; returns their paths.

    The gzip header's timestamp is 0, so the same documents give the same file bytes at every call: document ids
    derive from the file's checksum, and a near-duplicate cluster keeps its smallest id, so a corpus rewritten
    with a new timestamp would keep (slightly) different documents and runs of two calls would not compare."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    paths = [str(Path(out_dir) / f"part-{i:03d}.jsonl.gz") for i in range(files)]
    # each file is written beside its final name and renamed into place: a run still reading an earlier
    # version of the corpus keeps reading whole files, never one being rewritten
    handles = [io.TextIOWrapper(gzip.GzipFile(p + ".tmp", "wb", compresslevel=3, mtime=0), encoding="utf-8")
               for p in paths]
    try:
        for i, doc in enumerate(docs):
            handles[i % files].write(json.dumps(doc, ensure_ascii=False) + "\n")
    finally:
        for h in handles:
            h.close()
    for p in paths:
        os.replace(p + ".tmp", p)
    return paths
