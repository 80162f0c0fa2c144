"""HTML main-text extraction: quality and speed of corpusmill's extractor against trafilatura, Resiliparse and
"all text", on the development set (issue 45, item 6).

Interleaved: for every page, in every round, each extractor runs once on the same HTML string, in an order that
rotates with the page and is reversed every other page, so that a slow moment of the machine is shared and no
extractor always runs right after another on the same string (the second of two finds it in the CPU's caches: 5 to
9% faster, measured with ``--against``). Per extractor: token precision, recall and
F1 (``benchmarks/extract_score.py``) macro over pages, per language and kind, and throughput as MB of HTML per
CPU-second (``time.process_time``) and per wall second, summed over all rounds.

    python benchmarks/bench_extract.py [--data data/extract/dev.jsonl.gz] [--rounds 3] [--only corpusmill,...]
    python benchmarks/bench_extract.py --worst corpusmill --show 5    # the pages it does worst on
    python benchmarks/bench_extract.py --anonymize-names --kind templated  # structure alone: every class and id
                                                                          # value replaced by a meaningless one
    python benchmarks/bench_extract.py --handbook DIR   # real DocBook pages in 26 languages (handbook_pages)
    git show main:transforms/extract/core.py > /tmp/core_main.py
    python benchmarks/bench_extract.py --against /tmp/core_main.py  # another version of the core, same run
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import hashlib
import re
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.extract_score import macro, score  # noqa: E402


def extractors() -> dict:
    import trafilatura
    from resiliparse.extract.html2text import extract_plain_text

    from transforms.extract.config import ExtractConfig
    from transforms.extract.core import extract

    cfg = ExtractConfig()

    def corpusmill(html: str) -> str:
        return extract(html, cfg).text

    def trafilatura_default(html: str) -> str:
        # documented defaults for main text; tables included (the default), no precision/recall bias
        return trafilatura.extract(html, include_tables=True, include_comments=False, favor_precision=False,
                                   favor_recall=False) or ""

    def resiliparse_main(html: str) -> str:
        return extract_plain_text(html, main_content=True)

    def all_text(html: str) -> str:
        return extract_plain_text(html, main_content=False)

    return {"corpusmill": corpusmill, "trafilatura": trafilatura_default, "resiliparse": resiliparse_main,
            "all_text": all_text}


def design_variants() -> dict:
    """The designs weighed for corpusmill's extractor (``--variants``), against the one shipped: the same rules
    with Resiliparse's own main-content heuristics doing the last step, or the pruning rules alone (no root
    chosen) before Resiliparse's main-content extraction."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    from transforms.extract import core
    from transforms.extract.config import ExtractConfig

    cfg = ExtractConfig()

    def root_then_resiliparse_main(html: str) -> str:
        tree = HTMLTree.parse(html)
        body = tree.body
        if body is None or not body.text:
            return ""
        upper = core._has_upper_tags(html)
        root, _ = core._semantic_root(body, html, upper, len(body.text))
        if root is not None:
            core._isolate(body, root)
            core._prune(root, html, upper, len(root.text), cfg)
        else:
            core._prune(body, html, upper, len(body.text), cfg)
            root, _ = core._scored_root(body, len(body.text))
            core._isolate(body, root)
        core._drop_link_dense(root, html, cfg.boilerplate_link_density)
        return extract_plain_text(tree, preserve_formatting=True, main_content=True, list_bullets=False,
                                  comments=False)

    def prune_then_resiliparse_main(html: str) -> str:
        tree = HTMLTree.parse(html)
        body = tree.body
        if body is None or not body.text:
            return ""
        core._prune(body, html, core._has_upper_tags(html), len(body.text), cfg)
        return extract_plain_text(tree, preserve_formatting=True, main_content=True, list_bullets=False,
                                  comments=False)

    return {"variant:root+resiliparse_main": root_then_resiliparse_main,
            "variant:prune+resiliparse_main": prune_then_resiliparse_main}


def against_core(path: str) -> dict:
    """Another version of ``transforms/extract/core.py`` (a file: ``git show REF:transforms/extract/core.py``) as
    one more extractor, ``corpusmill@against``, with the default config: a change's speed and output measured
    against its base in the same interleaved run."""
    import importlib.util

    from transforms.extract.config import ExtractConfig

    spec = importlib.util.spec_from_file_location("corpusmill_against", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up while the file runs)
    spec.loader.exec_module(module)
    cfg = ExtractConfig()
    return {"corpusmill@against": lambda html: module.extract(html, cfg).text}


def load(path: str) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def handbook_pages(root: str, per_lang: int = 4, seed: int = 1) -> list[dict]:
    """Real DocBook pages in 26 languages: the Debian Administrator's Handbook's ``sect.*.html`` (``apt-get download
    debian-handbook && dpkg-deb -x debian-handbook_*.deb DIR``; ``root``: DIR/usr/share/doc/debian-handbook/html),
    ``per_lang`` drawn per translation. The truth is the page's first ``div.section`` (the chapter section: titles,
    paragraphs, note boxes, listings; no navigation), read with lxml, not with any extractor under test."""
    import glob
    import random

    import lxml.html

    rng, pages = random.Random(seed), []
    for lang in sorted(os.listdir(root)):
        paths = sorted(glob.glob(os.path.join(root, lang, "sect.*.html")))
        for path in rng.sample(paths, min(per_lang, len(paths))):
            with open(path, encoding="utf-8") as fh:
                html = fh.read()
            section = lxml.html.fromstring(html.encode()).xpath('//*[@class="section"]')[:1]
            truth = " ".join(section[0].text_content().split()) if section else ""
            pages.append({"html": html, "id": f"{lang}/{os.path.basename(path)}", "kind": "docbook", "lang": "multi",
                          "text": truth})
    return pages


_NAME_ATTR = re.compile(r"""\b(class|id)=("[^"]*"|'[^']*')""")


def anonymize_names(html: str) -> str:
    """Every class and id value replaced by a hash of it: no extractor can read boilerplate from a name, only
    from the page's structure (a stress test of the rules that would still hold on a site naming things its
    own way)."""
    return _NAME_ATTR.sub(lambda m: f'{m.group(1)}="x{hashlib.sha1(m.group(2).encode()).hexdigest()[:8]}"', html)


def run(pages: list[dict], fns: dict, rounds: int) -> tuple[dict, dict]:
    names = list(fns)
    cpu = defaultdict(float)
    wall = defaultdict(float)
    outputs: dict[str, list[str]] = {name: [""] * len(pages) for name in names}
    for r in range(rounds):
        for i, page in enumerate(pages):
            html = page["html"]
            k = i % len(names)
            order = names[k:] + names[:k]  # rotate the order per page
            if (i + r) % 2:  # and reverse it every other page: of two extractors, each runs second as often
                order.reverse()  # (the second of two runs on the same string finds it in the CPU's caches)
            for name in order:
                c0, w0 = time.process_time(), time.perf_counter()
                out = fns[name](html)
                cpu[name] += time.process_time() - c0
                wall[name] += time.perf_counter() - w0
                outputs[name][i] = out
    mb = rounds * sum(len(p["html"].encode("utf-8")) for p in pages) / 1e6
    speed = {name: (mb / cpu[name] if cpu[name] else float("inf"), mb / wall[name] if wall[name] else float("inf"))
             for name in names}
    return outputs, speed


def table(pages: list[dict], outputs: dict, speed: dict) -> str:
    groups = sorted({(p["lang"], p["kind"]) for p in pages})
    head = "| extractor | F1 all | P all | R all | " + " | ".join(f"F1 {l}/{k}" for l, k in groups) + \
        " | MB/CPU-s | MB/wall-s | CPU × trafilatura |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    base = speed.get("trafilatura", (None,))[0]
    for name, outs in outputs.items():
        scores = [score(o, p["text"]) for o, p in zip(outs, pages)]
        p_all, r_all, f_all, _ = macro(scores)
        per = [macro(s for s, p in zip(scores, pages) if (p["lang"], p["kind"]) == g)[2] for g in groups]
        cpu_s, wall_s = speed[name]
        ratio = f"{cpu_s / base:.1f}" if base else "-"
        lines.append(f"| {name} | {f_all:.3f} | {p_all:.3f} | {r_all:.3f} | " + " | ".join(f"{f:.3f}" for f in per) +
                     f" | {cpu_s:.1f} | {wall_s:.1f} | {ratio} |")
    counts = ", ".join(f"{l}/{k}: {sum(1 for p in pages if (p['lang'], p['kind']) == (l, k))}" for l, k in groups)
    return "\n".join(lines) + f"\n\npages: {len(pages)} ({counts})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data/extract/dev.jsonl.gz")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", help="comma-separated extractors (default: all)")
    ap.add_argument("--worst", help="list this extractor's worst pages")
    ap.add_argument("--kind", choices=["real", "templated"], help="only pages of this kind")
    ap.add_argument("--anonymize-names", action="store_true", help="replace every class and id value by a hash")
    ap.add_argument("--variants", action="store_true", help="also run the designs weighed for corpusmill's "
                                                            "extractor (design_variants)")
    ap.add_argument("--show", type=int, default=8)
    ap.add_argument("--handbook", help="instead of --data: the Debian handbook's html/ folder (handbook_pages)")
    ap.add_argument("--against", help="another version of transforms/extract/core.py (a file) as one more "
                                      "extractor, corpusmill@against (against_core)")
    args = ap.parse_args()
    pages = handbook_pages(args.handbook) if args.handbook else load(args.data)
    if args.kind:
        pages = [p for p in pages if p["kind"] == args.kind]
    if args.anonymize_names:
        pages = [{**p, "html": anonymize_names(p["html"])} for p in pages]
    fns = extractors()
    if args.against:
        fns = {"corpusmill": fns.pop("corpusmill"), **against_core(args.against), **fns}
    if args.variants:
        fns.update(design_variants())
    if args.only:
        fns = {k: v for k, v in fns.items() if k in args.only.split(",")}
    outputs, speed = run(pages, fns, args.rounds)
    print(table(pages, outputs, speed))
    if args.against and "corpusmill" in outputs and "corpusmill@against" in outputs:
        same = sum(a == b for a, b in zip(outputs["corpusmill"], outputs["corpusmill@against"]))
        print(f"corpusmill and corpusmill@against: the same text on {same} of {len(pages)} pages")
    if args.worst:
        scored = sorted((score(o, p["text"]), p["id"]) for o, p in zip(outputs[args.worst], pages))
        scored.sort(key=lambda x: x[0][2])
        for (p, r, f), pid in scored[:args.show]:
            print(f"  {pid}: P {p:.3f} R {r:.3f} F1 {f:.3f}")


if __name__ == "__main__":
    main()
