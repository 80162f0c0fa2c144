"""Build ``data/quality/textness_probe.jsonl.gz``: real text in languages the project has no quality model for, and
garbage of the kinds that reach a crawl (mojibake, replacement characters, keyboard mashing, symbol soup, code
dumps, repeated boilerplate, data dumps), to tune and to measure the language-independent text-ness judge
(``transforms.quality.textness``).

Real text: the translated manual pages Debian installs under ``/usr/share/man/<lang>/`` (rendered with groff),
cut into passages of whole paragraphs. Code: Python, Perl and C sources installed on the same machine. The garbage
is made here by generic corruptions of that real text (this file's own code; nothing from an evaluation set).

Split by source: each Debian package's pages (and each code family) go to exactly one of ``tune`` (what the
judge's weights are fitted on) and ``measure`` (what its figures are reported on), so no document, package or
code family is in both.

    python data/quality/build_textness_probe.py [--out data/quality/textness_probe.jsonl.gz]

Record: ``id, text, label (real|garbage), kind, lang, source (package or code family), split (tune|measure)``.
Licences of the sources: data/quality/README.md.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import json
import math
import os
import random
import re
import subprocess
from collections import defaultdict

LANGS = ("de", "fr", "es", "it", "pt", "nl", "sv", "pl", "ru", "uk", "ja", "ko", "tr", "en", "zh")
# where each language's pages are (en: the untranslated pages; zh: Simplified Chinese)
MAN_DIRS = {"en": "/usr/share/man/man*/*", "zh": "/usr/share/man/zh_CN/man*/*"}
MAX_PAGES = 150
# translations Debian ships with real mojibake in them (UTF-8 read as Latin-1: "PÃºblica"): not real text
BROKEN_PAGES = {("es", "fakeroot")}  # pages rendered per language (a deterministic sample)
# packages whose manual pages are measured on; every other package's pages are tuned on
MEASURE_PACKAGES = {"passwd", "login", "apt", "procps", "debianutils", "xz-utils", "adduser", "base-passwd", "xxd"}
PER_LANG = {"tune": 16, "measure": 16}  # real passages per language and split
GARBAGE_PER_KIND = {"tune": 40, "measure": 40}
# (tune, measure) code families
CODE = {"tune": ["/usr/lib/python3.11/*.py", "/usr/lib/python3.11/*/*.py"],
        "measure": ["/usr/include/*.h", "/usr/share/perl/5.*/*.pm", "/usr/share/perl/5.*/*/*.pm"]}
# encodings a UTF-8 byte stream is wrongly read as (and texts in them wrongly read as UTF-8)
WRONG_DECODINGS = ("latin-1", "cp1252", "gbk", "big5", "shift_jis", "euc-kr", "cp1251", "koi8-r", "iso-8859-2",
                   "mac_roman", "cp437", "euc-jp")
KEYBOARD_ROWS = {"latin": ["qwertyuiop", "asdfghjkl", "zxcvbnm", "qwertzuiop", "azertyuiop", "1234567890"],
                 "cyrillic": ["йцукенгшщзхъ", "фывапролджэ", "ячсмитьбю"],
                 "hangul": ["ㅂㅈㄷㄱㅅㅛㅕㅑㅐㅔ", "ㅁㄴㅇㄹㅎㅗㅓㅏㅣ", "ㅋㅌㅊㅍㅠㅜㅡ"],
                 "kana": ["たていすかんなにらせ", "ちとしはきくまのりれけ", "つさそひこみもねるめ"]}
SYMBOLS = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~§°±×÷¤¦¨©®¬¯µ¶·¸¹²³«»¿¡•…–—‘’“”†‡‰‹›€™→←↑↓■□▲△●○◆◇★☆"


def render(path: str) -> str:
    """A manual page as plain text: groff with one very long line, so that paragraphs are not wrapped."""
    roff = subprocess.run(["sh", "-c", f"zcat -f '{path}' | preconv | groff -man -Tutf8 -rLL=3000n -rHY=0 "
                                       f"-P-cbou"], capture_output=True, text=True, errors="replace").stdout
    return roff


def paragraphs(rendered: str) -> list[str]:
    """Body paragraphs (indented lines; headings and the page header/footer dropped), the synopsis skipped."""
    out, section = [], 0
    for block in re.split(r"\n\s*\n", rendered):
        lines = [ln for ln in block.split("\n") if ln.strip()]
        if not lines:
            continue
        if not lines[0].startswith(" "):  # a heading (NAME, SYNOPSIS, ...) or the header/footer line
            section += 1
            lines = lines[1:]
        if section == 2:  # the synopsis: command lines, not text
            continue
        text = " ".join(re.sub(r"\s+", " ", ln).strip() for ln in lines).strip()
        if len(text) >= 40:
            out.append(text)
    return out


SHORTEST, LONGEST = 250, 3000  # passage lengths: up to what the judge reads (textness.HEAD_CHARS)


def passage_length(rng: random.Random) -> int:
    """A document length drawn log-uniformly from SHORTEST to LONGEST, for real passages and every kind of
    garbage alike: when real text is short and garbage long, the judge learns length (the share of distinct
    characters and the compression ratio both fall as a text grows) and removes long real documents."""
    return round(math.exp(rng.uniform(math.log(SHORTEST), math.log(LONGEST))))


def passages(paras: list[str], rng: random.Random) -> list[str]:
    """Runs of consecutive paragraphs of a drawn length (``passage_length``), cut at LONGEST characters."""
    out, current, target = [], [], passage_length(rng)
    for para in paras:
        current.append(para[:LONGEST])
        if sum(map(len, current)) >= target:
            out.append("\n".join(current)[:target + 200])
            current, target = [], passage_length(rng)
    return out


def package_of(paths: list[str]) -> dict[str, str]:
    done = subprocess.run(["dpkg", "-S", *paths], capture_output=True, text=True)
    owners = {}
    for line in done.stdout.splitlines():
        pkg, _, path = line.partition(": ")
        owners[path.strip()] = pkg.split(",")[0].split(":")[0]
    return owners


# ----------------------------------------------------------------------------------------- corruptions


def mojibake(text: str, rng: random.Random) -> str:
    """UTF-8 bytes read in another encoding (sometimes twice), or text of another encoding read as UTF-8."""
    wrong = rng.choice(WRONG_DECODINGS)
    if rng.random() < 0.25:  # a legacy-encoded page read as UTF-8: replacement characters
        for source in ("cp1251", "gbk", "shift_jis", "euc-kr", "latin-1", "cp1252", "big5"):
            try:
                return text.encode(source).decode("utf-8", errors="replace")
            except UnicodeEncodeError:
                continue
    errors = rng.choice(("replace", "ignore"))
    out = text.encode("utf-8").decode(wrong, errors=errors)
    if rng.random() < 0.2:  # twice
        out = out.encode("utf-8").decode(rng.choice(("latin-1", "cp1252")), errors=errors)
    return out


def keyboard_mash(rng: random.Random, length: int) -> str:
    rows = KEYBOARD_ROWS[rng.choice(list(KEYBOARD_ROWS))]
    words = []
    while sum(len(w) + 1 for w in words) < length:
        row = rng.choice(rows)
        start = rng.randrange(len(row))
        n = rng.randint(2, 12)
        if rng.random() < 0.5:  # a run along the row
            word = "".join(row[(start + i * rng.choice((1, 1, 2, -1))) % len(row)] for i in range(n))
        else:
            word = "".join(rng.choice(row) for _ in range(n))
        if rng.random() < 0.1:
            word = word.upper()
        words.append(word + rng.choice(("", "", "", ".", "!", ",", "?!")))
    sep = rng.choice((" ", " ", "\n"))
    return sep.join(words)[:length]


def symbol_soup(rng: random.Random, length: int, letters: str) -> str:
    pool = SYMBOLS + "0123456789" * 2 + letters[:200]
    out = []
    while len(out) < length:
        out.append(rng.choice(pool) if rng.random() > 0.15 else " ")
        if rng.random() < 0.02:
            out.append("\n")
    return "".join(out)


def boilerplate(headings: list[str], rng: random.Random, length: int) -> str:
    """Navigation chrome: a few real headings of the language repeated line after line."""
    items = rng.sample(headings, min(len(headings), rng.randint(3, 7)))
    sep = rng.choice((" | ", " · ", "  ", " > ", " / ", "\n"))
    lines = []
    while sum(map(len, lines)) < length:
        line = sep.join(items)
        if rng.random() < 0.3:
            line += f" {rng.randint(1, 99)}"
        if rng.random() < 0.3:
            line = rng.choice(items) + sep + line
        lines.append(line)
    return "\n".join(lines)


def data_dump(rng: random.Random, length: int) -> str:
    import base64

    raw = bytes(rng.getrandbits(8) for _ in range(length))
    kind = rng.choice(("base64", "hex", "numbers"))
    if kind == "base64":
        text = base64.b64encode(raw).decode()
        return "\n".join(text[i:i + 76] for i in range(0, length, 76))
    if kind == "hex":
        return "\n".join(" ".join(f"{b:02x}" for b in raw[i:i + 16]) for i in range(0, length // 3, 16))
    return "\n".join(" ".join(f"{rng.uniform(-1e4, 1e4):.{rng.randint(0, 4)}f}" for _ in range(rng.randint(3, 9)))
                     for _ in range(length // 40))


def code_passages(pattern_list: list[str], rng: random.Random, n: int) -> list[tuple[str, str]]:
    files = sorted(f for pattern in pattern_list for f in glob.glob(pattern))
    rng.shuffle(files)
    out = []
    for path in files:
        try:
            with open(path, encoding="utf-8") as fh:
                source = fh.read()
        except (OSError, UnicodeDecodeError):
            continue
        length = passage_length(rng)
        if len(source) < length + 300:
            continue
        start = rng.randrange(0, len(source) - length)
        start = source.rfind("\n", 0, start) + 1
        family = "python" if path.endswith(".py") else "perl" if path.endswith(".pm") else "c"
        out.append((source[start:start + length], family))
        if len(out) >= n:
            break
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "textness_probe.jsonl.gz"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    real: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)  # (lang, split) -> (text, package)
    headings: dict[tuple[str, str], set[str]] = defaultdict(set)
    for lang in LANGS:
        paths = sorted(glob.glob(MAN_DIRS.get(lang, f"/usr/share/man/{lang}/man*/*")))
        random.Random(lang).shuffle(paths)
        paths = sorted(paths[:MAX_PAGES])
        owners = package_of(paths)
        for path in paths:
            pkg = owners.get(path, "unknown")
            split = "measure" if pkg in MEASURE_PACKAGES else "tune"
            rendered = render(path)
            for ln in rendered.split("\n"):
                if ln.strip() and not ln.startswith(" ") and 3 <= len(ln.strip()) <= 30:
                    headings[(lang, split)].add(ln.strip())
            if (lang, pkg) in BROKEN_PAGES:
                continue
            for passage in passages(paragraphs(rendered), rng):
                real[(lang, split)].append((passage, pkg))
    records = []

    def add(text, label, kind, lang, source, split):
        records.append({"id": f"{split}-{len(records):05d}", "text": text, "label": label, "kind": kind,
                        "lang": lang, "source": source, "split": split})

    for split in ("tune", "measure"):
        pool = []
        for lang in LANGS:
            found = real[(lang, split)]
            rng.shuffle(found)
            for text, pkg in found[:PER_LANG[split]]:
                add(text, "real", "prose", lang, pkg, split)
            pool += [(lang, text, pkg) for text, pkg in found[PER_LANG[split]:]]  # corrupted, never also real
        rng.shuffle(pool)
        take = iter(pool)
        n = GARBAGE_PER_KIND[split]
        for _ in range(n):
            while True:  # a passage the corruption changes (plain ASCII reads the same in every encoding)
                lang, text, pkg = next(take)
                broken = mojibake(text, rng)
                if sum(a != b for a, b in zip(broken, text)) + abs(len(broken) - len(text)) >= 0.05 * len(text):
                    break
            add(broken, "garbage", "mojibake", lang, pkg, split)
        for _ in range(n):
            lang = rng.choice(LANGS)
            add(keyboard_mash(rng, passage_length(rng)), "garbage", "keyboard_mash", lang, "generated", split)
        for _ in range(n):
            lang, text, pkg = next(take)
            add(symbol_soup(rng, passage_length(rng), text), "garbage", "symbol_soup", lang, pkg, split)
        for _ in range(n):
            lang = rng.choice([lg for lg in LANGS if len(headings[(lg, split)]) >= 5])
            add(boilerplate(sorted(headings[(lang, split)]), rng, passage_length(rng)), "garbage", "boilerplate",
                lang, "headings", split)
        for _ in range(n // 2):
            add(data_dump(rng, passage_length(rng)), "garbage", "data_dump", "none", "generated", split)
        for text, family in code_passages(CODE[split], rng, n):
            add(text, "garbage", "code_dump", "code", family, split)
    with gzip.open(args.out, "wt", encoding="utf-8", compresslevel=9) as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    counts = defaultdict(int)
    for r in records:
        counts[(r["split"], r["label"], r["kind"])] += 1
    for key in sorted(counts):
        print(*key, counts[key])
    print(f"{len(records)} records -> {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
