"""A language-independent judge of text-ness: P(real text) of a document from character-level signals alone, for
documents no language's quality model can judge (their language has none, or language identification is unsure).

Signals (``textness_features``; each measured on one window of at most ``HEAD_CHARS`` characters):
    mojibake        share of the non-ASCII characters that decode to valid UTF-8 when re-encoded in a legacy
                    encoding (UTF-8 read as Latin-1, cp1252, GBK, Big5, Shift-JIS, EUC-KR, cp1251, ...)
    replacement     U+FFFD and control characters (text of another encoding read as UTF-8)
    script_switch   letters next to a letter of an unrelated script inside a word (Latin|Cyrillic, halfwidth kana
                    inside Latin words: what a wrong decoding leaves), per letter
    letters, digits, symbols, code_symbols, spaces     shares of the characters
    code_tokens     identifiers with ``_``, dotted calls, ``->``/``::``, camelCase, comparisons (not a ruler of
                    ``=``), per token
    indented        lines opening with indentation
    compression     zlib size / UTF-8 size (repetition compresses, random keys do not)
    dup_lines, dup_ngrams   characters in repeated lines; repeated word 3-grams (characters 6-grams without spaces)
    distinct        distinct characters per character
    vowels          vowels among Latin and Cyrillic letters, marked ones too, saturated at a third (keyboard
                    mashing has few; German and Polish have as many as a language needs); neutral in other scripts
    long_tokens     characters in whitespace tokens of 25+ characters outside CJK text (base64, hashes)
    upper           capitals among cased letters (Latin and Cyrillic text)
    repeated_chars  characters in runs of 4+ of the same character
    code_lines      lines that end or open as code does (``;`` ``{`` ``}`` ``)`` ``:`` ``,`` ``=`` ``\\``; ``#``
                    ``//`` ``/*`` ``*`` ``@`` ``$`` ``<``): normalize strips indentation, this survives it
    short_tokens    whitespace tokens of 1-3 characters (function words: random key runs have few); neutral in
                    text without spaces between words
    ideographs      Han characters and Hangul syllable blocks among the East Asian letters (with kana and loose
                    jamo), saturated at a tenth: real Japanese writes kanji among its kana, real Korean writes
                    syllable blocks; loose jamo or kana alone is what a keyboard left (1 without East Asian letters)

A logistic regression over these (``TextnessJudge``) scores each window of a document; the document's score is the
windows' mean weighted by their length (``text_windows``: a document over ``HEAD_CHARS`` characters is cut at line
ends into windows of 1,500 to about 3,000 characters, the lengths the judge was fitted on, up to ``MAX_WINDOWS`` of them).
So a manual page whose prose surrounds a checksum listing scores by how much of it is prose, and garbage after a
fluent first screen is not waved through by its head. The judge is fitted by ``fit_textness_judge`` on the tune split of the
shipped probe (``data/quality/textness_probe.jsonl.gz``: real passages in 15 languages, garbage from generic
corruptions; never an evaluation set), stored as plain JSON (``data/quality/textness_judge.json``). The judge only
scores (``annotations.quality.textness``); the quality step's policy decides (``quality.unmodelled`` /
``quality.unsure``).
"""
from __future__ import annotations

import json
import re
import zlib
from pathlib import Path
from typing import Sequence

import numpy as np

from transforms.quality.model import LogisticStacker

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_JUDGE = "data/quality/textness_judge.json"
HEAD_CHARS = 3000
# windows read per document: 12,000 characters bound the judge's cost on a long document while reading past any
# one listing or table
MAX_WINDOWS = 4
# encodings a UTF-8 byte stream is wrongly read as
LEGACY_ENCODINGS = ("latin-1", "cp1252", "iso-8859-2", "cp1251", "koi8-r", "mac_roman", "cp437", "gbk", "big5",
                    "shift_jis", "euc-kr", "euc-jp")
FEATURES = ("mojibake", "replacement", "script_switch", "letters", "digits", "symbols", "code_symbols", "spaces",
            "code_tokens", "indented", "compression", "dup_lines", "dup_ngrams", "distinct", "vowels", "long_tokens",
            "upper", "repeated_chars", "short_tokens", "code_lines", "ideographs")

_NON_ASCII = re.compile(r"[^\x00-\x7f]")
# the characters of living scripts and common punctuation: what a correct decoding mostly yields
_COMMON = re.compile("[\u00a0-\u017f\u0391-\u03c9\u0401-\u045f\u0490\u0491\u2010-\u2027\u2030-\u203a\u20ac"
                     "\u3000-\u30ff\u4e00-\u9fff\uac00-\ud7a3\uff01-\uff5e]")
_BAD_CHARS = re.compile("[\ufffd\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# letters, and the combining marks of scripts that write vowels as marks (Devanagari and the other Indic scripts,
# Thai, Arabic and Hebrew points): a mark is no symbol
_LETTER = re.compile("[^\\W\\d_]|[\u0300-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670"
                     "\u06d6-\u06ed\u0900-\u0dff\u0e00-\u0eff\u0f00-\u0fff\u1000-\u109f\u1780-\u17ff]")
_DIGIT = re.compile(r"\d")
_SPACE = re.compile(r"\s")
_CODE_SYMBOL = re.compile(r"[{}\[\]();=<>_#*\\|~^`$@&%/+]")
# a comparison operator (``==`` ``!=`` ``<=`` ``===``), not a ruler of ``=`` (a Markdown or reST heading's underline,
# a mail signature's frame: as many "operators" as it has characters, in real text)
_CODE_TOKEN = re.compile(r"\w+_\w+|\w+\.\w+\(|->|::|\b[a-z]+[A-Z]\w*|\w+\(\)?|(?<![=!<>])[=!<>]==?(?!=)")
_INDENTED = re.compile(r"^(?: {2,}|\t)\S", re.M)
_CODE_LINE = re.compile(r"[;{}()\[\]:,=\\]$|^(?:#|//|/\*|\*|@|\$|<|=)")


def _latin_vowels() -> str:
    """Every Latin letter whose base letter is a vowel, whatever its marks (Vietnamese ư ơ ạ ế, Turkish ı, Czech
    ě ů, Latvian ā ē ī ū, Romanian ă): a vowel written with a mark is still a vowel."""
    import unicodedata

    chars = [chr(c) for r in ((0x41, 0x250), (0x1E00, 0x1F00)) for c in range(*r)]
    return "".join(c for c in chars if c.isalpha()
                   and unicodedata.normalize("NFD", c)[0].lower() in "aeiouy") + "ıæÆœŒøØ"


_VOWEL = re.compile(f"[{_latin_vowels()}аеёиоуыэюяіїєАЕЁИОУЫЭЮЯІЇЄ]")
_LATIN_CYRILLIC = re.compile("[A-Za-z\u00c0-\u024f\u1e00-\u1eff\u0400-\u04ff]")
_CASED_UPPER = re.compile(r"[A-Z\u00c0-\u00de\u0410-\u042f]")
_CASED = re.compile(r"[A-Za-z\u00c0-\u00ff\u0400-\u04ff]")
_REPEATED_CHAR = re.compile(r"(.)\1{3,}")
_IDEOGRAPH = re.compile("[\u3400-\u9fff\uf900-\ufaff\uac00-\ud7a3]")  # Han, Hangul syllables
_KANA_JAMO = re.compile("[\u3040-\u30ff\u3130-\u318f\u1100-\u11ff\uff66-\uff9f]")  # kana, loose jamo
_CJK = re.compile("[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")
# letter classes whose meeting inside a word is a sign of a wrong decoding (Latin next to CJK is ordinary text:
# "Linux内核"); halfwidth kana (U+FF61-FF9F) and hangul jamo of old encodings are their own class
_SCRIPT_CLASSES = (("latin", "A-Za-z\u00c0-\u024f\u1e00-\u1eff"), ("cyrillic", "\u0400-\u04ff"),
                   ("greek", "\u0370-\u03ff"), ("arabic", "\u0600-\u06ff"), ("hebrew", "\u0590-\u05ff"),
                   ("halfwidth", "\uff61-\uffdc"), ("box", "\u2500-\u259f"))


def _script_table() -> dict[int, str]:
    """A ``str.translate`` table: each letter of a class of ``_SCRIPT_CLASSES`` to its class's code letter, every
    other ASCII character to ``.`` (so that no character is taken for a class it is not)."""
    table = {c: "." for c in range(128)}
    for code, (_, ranges) in zip("LCGAHWB", _SCRIPT_CLASSES):
        for part in re.findall(r"(.)-(.)|(.)", ranges):
            first, last = (part[0], part[1]) if part[0] else (part[2], part[2])
            for c in range(ord(first), ord(last) + 1):
                table[c] = code
    return table


_SCRIPT_TABLE = _script_table()
_SWITCH = re.compile(r"([LCGAHWB])(?=[LCGAHWB])(?!\1)")


def mojibake_share(text: str) -> float:
    """Share of the non-ASCII characters that, re-encoded in one legacy encoding, form valid UTF-8 (weighed by
    how common the repaired characters are and how nearly every byte took part): the best encoding's. Real text re-encoded that way makes invalid UTF-8 (an accented letter is one byte > 0x7f, a GBK
    character two bytes that are no UTF-8 sequence), so it scores near 0."""
    non_ascii = len(_NON_ASCII.findall(text))
    if non_ascii < 4:
        return 0.0
    ascii_chars = len(text) - non_ascii
    best = 0.0
    for encoding in LEGACY_ENCODINGS:
        raw = text.encode(encoding, errors="ignore")
        high = len(raw) - len(raw.translate(None, _HIGH))
        if high < 4:
            continue
        decoded = raw.decode("utf-8", errors="replace").replace("\ufffd", "")
        # bytes > 0x7f that formed valid UTF-8 characters (an invalid run of several bytes is one U+FFFD, so
        # counting those would undercount the invalid bytes)
        valid = len(decoded.encode("utf-8")) - len(decoded.encode("ascii", errors="ignore"))
        if not valid:
            continue
        # a real repair gives the letters of living scripts; real text of one script re-encoded can form valid
        # UTF-8 by chance (Cyrillic in GBK reads as old Cyrillic, Thaana and Hebrew points): weighed by how
        # common the characters it yields are
        repaired = _NON_ASCII.findall(decoded)
        common = len(_COMMON.findall(decoded)) / max(len(repaired), 1)
        # and a repair turns (nearly) every high byte into valid UTF-8, where chance turns a third to a half of
        # them (CJK text re-encoded in another CJK encoding)
        purity = min(max((valid / high - 0.5) / 0.4, 0.0), 1.0)
        # and the characters the encoding holds (a document of several scripts is mojibake in part only)
        held = (len(raw.decode(encoding, errors="ignore")) - ascii_chars) / non_ascii
        best = max(best, min(1.0, valid / high * common * purity * held))
    # UTF-8 read as Latin-1 yields C1 control characters (U+0080-U+009F), which normalize removes: what is left
    # still has the structure of UTF-8 (a lead byte followed by continuation bytes), which Latin-1 text (an
    # accented letter between ASCII ones) does not have
    for encoding in ("latin-1", "iso-8859-2"):
        raw = text.encode(encoding, errors="ignore")
        high = len(raw) - len(raw.translate(None, _HIGH))
        if high < 4:
            continue
        structured = sum(len(m) for m in _UTF8_SHAPE.findall(raw)) / high
        held = (len(raw.decode(encoding)) - ascii_chars) / non_ascii
        best = max(best, min(1.0, structured * min(max((structured - 0.5) / 0.4, 0.0), 1.0) * held))
    return best


_HIGH = bytes(range(0x80, 0x100))
_UTF8_SHAPE = re.compile(rb"[\xc2-\xf4][\x80-\xbf]+")


def _dup_share(items: Sequence) -> float:
    if not items:
        return 0.0
    seen: dict = {}
    for item in items:
        seen[item] = seen.get(item, 0) + 1
    return sum(n for n in seen.values() if n > 1) / len(items)


def text_windows(text: str) -> list[str]:
    """The windows the judge reads: the text itself up to ``HEAD_CHARS`` characters; a longer one cut into
    ``ceil(len / HEAD_CHARS)`` near-equal windows (at most ``MAX_WINDOWS``, from the start), each cut at the line end
    nearest its share, else at a space, so every window holds 1,500 to about 3,000 characters."""
    if len(text) <= HEAD_CHARS:
        return [text]
    text = text[:HEAD_CHARS * MAX_WINDOWS]
    n = -(-len(text) // HEAD_CHARS)
    size = len(text) / n
    windows, start = [], 0
    for i in range(1, n):
        target = round(i * size)
        lo, hi = max(start + 1, target - int(size / 4)), min(len(text) - 1, target + int(size / 4))
        cut = _nearest(text, "\n", target, lo, hi)
        if cut is None:
            cut = _nearest(text, " ", target, lo, hi)
        cut = target if cut is None else cut + 1
        windows.append(text[start:cut])
        start = cut
    windows.append(text[start:])
    return windows


def _nearest(text: str, sep: str, target: int, lo: int, hi: int) -> int | None:
    before, after = text.rfind(sep, lo, target + 1), text.find(sep, target, hi)
    candidates = [i for i in (before, after) if i >= 0]
    return min(candidates, key=lambda i: abs(i - target)) if candidates else None


def textness_features(text: str) -> list[float]:
    """The signals of ``FEATURES`` for one window (see the module docstring); reads its first ``HEAD_CHARS``
    characters."""
    head = text[:HEAD_CHARS]
    chars = max(len(head), 1)
    non_space = max(chars - len(_SPACE.findall(head)), 1)
    letters = len(_LETTER.findall(head))
    digits = len(_DIGIT.findall(head))
    tokens = head.split()
    n_tokens = max(len(tokens), 1)
    lines = [ln.strip() for ln in head.split("\n") if ln.strip()]
    raw = head.encode("utf-8")
    compression = len(zlib.compress(raw, 6)) / max(len(raw), 1) if raw else 1.0
    cjk = len(_CJK.findall(head))
    if cjk > 0.3 * max(letters, 1):  # no spaces between words: character 6-grams
        grams = [head[i:i + 6] for i in range(0, max(len(head) - 5, 0))]
    else:
        grams = list(zip(tokens, tokens[1:], tokens[2:]))
    line_chars = sum(map(len, lines)) or 1
    seen: dict[str, int] = {}
    for ln in lines:
        seen[ln] = seen.get(ln, 0) + 1
    dup_lines = sum(len(ln) * n for ln, n in seen.items() if n > 1) / line_chars
    lat_cyr = len(_LATIN_CYRILLIC.findall(head))
    # vowels and capitals say something only in text written in Latin or Cyrillic letters (Korean or Japanese
    # quoting option names is not short of vowels): elsewhere the typical value, 0.4 and 0.1
    alphabetic = lat_cyr >= 30 and lat_cyr >= 0.5 * letters
    # saturated at a third: German, Czech or Polish (a third of letters vowels) are as much text as Italian; only
    # consonant runs well below that (keyboard rows) tell
    vowels = min(len(_VOWEL.findall(head)) / lat_cyr / 0.33, 1.0) if alphabetic else 1.0
    cased = len(_CASED.findall(head))
    upper = len(_CASED_UPPER.findall(head)) / cased if alphabetic and cased >= 20 else 0.1
    long_chars = sum(len(t) for t in tokens if len(t) >= 25 and not _CJK.search(t))
    repeated = sum(len(m.group(0)) for m in _REPEATED_CHAR.finditer(head))
    ideographs, kana_jamo = len(_IDEOGRAPH.findall(head)), len(_KANA_JAMO.findall(head))
    return [
        mojibake_share(head),
        len(_BAD_CHARS.findall(head)) / chars,
        len(_SWITCH.findall(head.translate(_SCRIPT_TABLE))) / max(letters, 1),
        letters / non_space,
        digits / non_space,
        (non_space - letters - digits) / non_space,
        len(_CODE_SYMBOL.findall(head)) / non_space,
        (chars - non_space) / chars,
        len(_CODE_TOKEN.findall(head)) / n_tokens,
        len(_INDENTED.findall(head)) / max(len(lines), 1),
        compression,
        dup_lines,
        _dup_share(grams),
        len(set(head[:1000])) / min(chars, 1000),  # over a fixed window: longer text repeats more characters
        vowels,
        long_chars / non_space,
        upper,
        repeated / chars,
        sum(1 for t in tokens if len(t) <= 3) / n_tokens if cjk <= 0.3 * max(letters, 1) else 0.35,
        sum(1 for ln in lines if _CODE_LINE.search(ln)) / max(len(lines), 1),
        # saturated at a tenth: Japanese prose has a fifth to a third kanji, Chinese and Korean all; what tells is
        # none at all
        min(ideographs / (ideographs + kana_jamo) / 0.1, 1.0) if ideographs + kana_jamo >= 20 else 1.0,
    ]


class TextnessJudge:
    """Logistic regression over the standardised ``FEATURES``: ``score(texts)`` → P(real text) per text. Linear,
    so monotone in every signal: more mojibake never makes a document more text-like (pairwise products of the
    signals fitted the tune split better, but scored obvious Latin-1 mojibake of Cyrillic as text)."""

    ARRAYS = ("low", "high", "base_mean", "base_scale", "mean", "scale", "weights")

    def __init__(self, low: np.ndarray, high: np.ndarray, base_mean: np.ndarray, base_scale: np.ndarray,
                 model: LogisticStacker, meta: dict | None = None):
        self.low, self.high = low, high  # the range each signal had in the fitting data
        self.base_mean, self.base_scale = base_mean, base_scale
        self.model = model
        self.meta = meta or {}

    def inputs(self, x: np.ndarray) -> np.ndarray:
        # a signal outside the range it was fitted on is not extrapolated (a 60-character document has a share
        # of distinct characters no passage had)
        return (np.clip(x, self.low, self.high) - self.base_mean) / self.base_scale

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """P(real text) per text: the mean over its windows (``text_windows``), weighted by their length, of the
        regression's P times the share of the window's non-ASCII characters that are not repairable mojibake (a
        window whose characters are 80 % the bytes of a wrong decoding is at most 20 % text, however fluent the
        rest of its signals look: short mojibake of CJK text has as many distinct characters as real CJK text)."""
        if not texts:
            return np.zeros(0)
        windows = [text_windows(t) for t in texts]
        flat = [w for ws in windows for w in ws]
        x = np.array([textness_features(w) for w in flat], dtype=np.float64)
        p_real = 1.0 / (1.0 + np.exp(-np.clip(self.model.logit(self.inputs(x)), -40, 40)))
        per_window = p_real * (1.0 - x[:, FEATURES.index("mojibake")])
        weights = np.array([max(len(w), 1) for w in flat], dtype=np.float64)
        owner = np.repeat(np.arange(len(texts)), [len(ws) for ws in windows])
        return np.bincount(owner, per_window * weights, len(texts)) / np.bincount(owner, weights, len(texts))

    def to_json(self) -> dict:
        values = {"low": self.low, "high": self.high, "base_mean": self.base_mean, "base_scale": self.base_scale,
                  "mean": self.model.mean, "scale": self.model.scale, "weights": self.model.weights}
        return {"kind": "corpusmill text-ness judge: logistic regression over character-level signals",
                "features": list(FEATURES),
                **{k: v.tolist() for k, v in values.items()}, "bias": self.model.bias, **self.meta}

    @classmethod
    def load(cls, path: str | None = None) -> "TextnessJudge":
        path = resolve_judge(path)
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if list(data.get("features", [])) != list(FEATURES):
            raise ValueError(f"{path}: fitted on features {data.get('features')}, this code computes "
                             f"{list(FEATURES)} (refit it: python benchmarks/bench_textness.py fit)")
        arrays = {k: np.array(data[k], dtype=np.float64) for k in cls.ARRAYS}
        meta = {k: v for k, v in data.items() if k not in (*cls.ARRAYS, "features", "bias", "kind")}
        model = LogisticStacker(arrays["mean"], arrays["scale"], arrays["weights"], data["bias"])
        return cls(arrays["low"], arrays["high"], arrays["base_mean"], arrays["base_scale"], model, meta)


def resolve_judge(path: str | None) -> str:
    """The configured judge, or the shipped one (relative paths: the cwd, then the repository)."""
    path = path or DEFAULT_JUDGE
    if Path(path).exists() or Path(path).is_absolute():
        return path
    in_repo = REPO_ROOT / path
    return str(in_repo) if in_repo.exists() else path


def fit_textness_judge(texts: Sequence[str], is_real: Sequence[bool], l2: float = 1.0,
                       meta: dict | None = None) -> TextnessJudge:
    """Fit the judge on labelled texts (real text vs garbage)."""
    x = np.array([textness_features(t) for t in texts], dtype=np.float64)
    y = np.asarray(is_real, dtype=np.float64)
    base_mean, base_scale = x.mean(axis=0), x.std(axis=0)
    base_scale[base_scale < 1e-9] = 1.0
    judge = TextnessJudge(x.min(axis=0), x.max(axis=0), base_mean, base_scale, None, meta)
    judge.model = LogisticStacker.fit(judge.inputs(x), y, l2)
    return judge
