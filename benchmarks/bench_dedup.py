"""Near-duplicate removal: corpusmill against datasketch and rensa, interleaved, on the labelled dev set and on a
larger real set, with quality against both truths.

    .venv/bin/python benchmarks/bench_dedup.py [--sets dev,large] [--reps 3] [--variants] [--profile]

Every method runs end to end as its own subprocess (interpreter start, imports, reading the .jsonl.gz, sketching,
candidates, verification, clustering, writing one ``{id, cluster, kept}`` line per document), one after the
other in each repetition (A B C D A B C D ...), so that the shared machine's load falls on all alike:

* ``datasketch``: datasketch 2.0 as its documentation recommends: ``MinHash(num_perm=128).update_batch`` over
  the document's shingles, ``MinHashLSH(threshold=0.8)``, candidates kept when their estimated Jaccard is
  >= 0.8, union-find; documents streamed (only the sketches are kept);
* ``rensa``: rensa 0.5.0 (Rust; not a product dependency: installed with ``pip install --target $RENSA_DIR``,
  default ``/tmp/rensa_pkgs``, and put on ``sys.path`` only if that folder exists; the benchmark says so and
  skips it when it is missing): ``RMinHash(num_perm=128).update`` + ``RMinHashLSH(threshold=0.8, num_bands=16)``, candidates
  verified with ``RMinHash.jaccard >= 0.8``, union-find; streamed the same way;
* ``corpusmill dedup`` with its defaults (the in-memory path: on the local runner it runs the pure core in this
  process on the record stream and never imports Beam);
* ``corpusmill dedup --runner inprocess``: the same in-memory decisions as a Beam pipeline in one process;
* ``corpusmill dedup --set near_dedup.mode=beam --workers 2`` (the distributed path on 2 local workers), and the
  same with ``--runner dask`` (on a 2-worker Dask LocalCluster started by the command);
* with ``--variants`` also: corpusmill with datasketch-compatible signatures (``scheme=affine32,
  shingle_hash=sha1``), rank-order stars, SimHash, ``verify=estimated``.

The baselines shingle like the dev set's truth (``\\w+`` words after NFKC and lower-casing, 5-word shingles;
CJK characters one token each, mostly-CJK documents in character 5-grams, as the larger set's truth and
corpusmill do).

Measured per run: wall time, CPU time (user + system of the process and every descendant, Beam's worker
processes included), peak RSS (the process tree, sampled every 20 ms, and the process's own maximum from
``wait4`` where it exceeds this process's peak, which a child inherits through fork and exec). Reported: medians over the repetitions, ratios to datasketch and rensa, and the quality of each
method's clusters scored as ``../shared/eval/README.md`` defines (pairs within a predicted cluster against the
exact-Jaccard >= 0.8 pairs and against the cluster labels, recall per Jaccard bin, predicted pairs with J < 0.5,
residual duplicates and truth clusters lost when one document per predicted cluster is kept).

The larger set (``benchmarks/out/dedup_large.jsonl.gz`` and ``_pairs.tsv.gz``, built once, deterministic) is every
document of ``../shared/corpora/real_text_sample.jsonl.gz`` plus edited copies made here (word or character
substitutions/insertions/deletions/swaps at 0.2–12 %, paragraph swaps, truncation, lines of other real documents
added as chrome); its exact-Jaccard pairs (J >= 0.5) come from an exact prefix-filter similarity join. Its
cluster truth groups an original with its copies only (natural duplicates inside the sample, e.g. the same page
in several versions, are separate clusters there, so cluster-truth precision is a lower bound). ``../shared`` is
the folder beside the checkout, or ``$CORPUSMILL_SHARED`` (a clone elsewhere).

``--profile`` samples ``corpusmill dedup`` (both paths) with py-spy (``pip install py-spy``) and prints where the
time goes by stage. Writes ``benchmarks/out/dedup.json`` and prints Markdown tables for benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import itertools
import json
import math
import os
import random
import resource
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CORPUSMILL_SHARED", REPO.parent / "shared"))
OUT_DIR = REPO / "benchmarks/out"
BINS = [(0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.0001)]
RENSA = "rensa==0.5.0"
LARGE_VERSION = 1

# ---------------------------------------------------------------- shingles as the truth defines them
# (written here independently of transforms/near_dedup, which is what is measured)

_CJK = "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RE = re.compile(f"[{_CJK}]")
_MIXED_RE = re.compile(f"[{_CJK}]|[^\\W{_CJK}]+")
_WORD_RE = re.compile(r"\w+")


def truth_units(text: str) -> list[str]:
    """Words (``\\w+`` after NFKC + lower-case), CJK characters one token each; a mostly-CJK text → its
    word characters one by one."""
    text = unicodedata.normalize("NFKC", text).lower()
    if not _CJK_RE.search(text):
        return _WORD_RE.findall(text)
    tokens = _MIXED_RE.findall(text)
    n_cjk = sum(1 for t in tokens if len(t) == 1 and _CJK_RE.match(t))
    if 2 * n_cjk > len(tokens):
        return [c for t in tokens for c in t]
    return tokens


def truth_shingles(text: str, n: int = 5) -> set[str]:
    units = truth_units(text)
    if not units:
        return set()
    n = min(n, len(units))
    return {" ".join(units[i:i + n]) for i in range(len(units) - n + 1)}


# ---------------------------------------------------------------- data and scoring


def load_records(path: str) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def load_pairs(path: str) -> dict[frozenset, float]:
    pairs = {}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            a, b, jaccard, _ = line.rstrip("\n").split("\t")
            pairs[frozenset((a, b))] = float(jaccard)
    return pairs


def predicted_pairs(clusters: dict[str, object]) -> set[frozenset]:
    members = collections.defaultdict(list)
    for doc_id, cluster in clusters.items():
        members[cluster].append(doc_id)
    return {frozenset(p) for group in members.values() for p in itertools.combinations(group, 2)}


def _prf(predicted: set, truth: set) -> dict:
    tp = len(predicted & truth)
    precision = tp / len(predicted) if predicted else 1.0
    recall = tp / len(truth) if truth else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4)}


def score(clusters: dict[str, object], kept: set[str], records: list[dict], pairs: dict[frozenset, float]) -> dict:
    """``clusters``: doc id → predicted cluster; ``kept``: the one document kept per predicted cluster."""
    predicted = predicted_pairs(clusters)
    exact_truth = {p for p, j in pairs.items() if j >= 0.8}
    by_cluster = collections.defaultdict(list)
    for rec in records:
        by_cluster[rec["cluster_id"]].append(rec["id"])
    cluster_truth = {frozenset(p) for group in by_cluster.values() for p in itertools.combinations(group, 2)}
    recall_by_bin = {}
    for lo, hi in BINS:
        in_bin = {p for p, j in pairs.items() if lo <= j < hi}
        recall_by_bin[f"{lo:.1f}-{min(hi, 1.0):.1f}"] = round(len(in_bin & predicted) / len(in_bin), 4) if in_bin else None
    kept_pairs = {p for p in exact_truth if p <= kept}
    return {
        "exact_j08": _prf(predicted, exact_truth),
        "cluster_truth": _prf(predicted, cluster_truth),
        "recall_by_jaccard_bin": recall_by_bin,
        "predicted_pairs": len(predicted),
        "pairs_below_j05": sum(1 for p in predicted if pairs.get(p, 0.0) < 0.5),
        "residual_dup_pairs_j08": len(kept_pairs),
        "truth_clusters_lost": sum(1 for group in by_cluster.values() if not any(d in kept for d in group)),
        "removed": len(records) - len(kept),
    }


# ---------------------------------------------------------------- the larger set


def _edit_units(units: list[str], rate: float, rng: random.Random) -> list[str]:
    """Seeded substitutions, deletions, insertions and swaps at ``rate`` per unit (word or character)."""
    units = units[:]
    for _ in range(max(1, round(len(units) * rate))):
        if len(units) < 3:
            break
        i = rng.randrange(len(units))
        op = rng.random()
        if op < 0.35:
            units[i] = rng.choice(units)
        elif op < 0.6:
            del units[i]
        elif op < 0.85:
            units.insert(i, rng.choice(units))
        else:
            j = min(i + 1, len(units) - 1)
            units[i], units[j] = units[j], units[i]
    return units


def _edit(text: str, lang: str, rng: random.Random, chrome_pool: list[str]) -> tuple[str, str]:
    recipe = []
    rate = rng.choice([0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.12])
    if lang == "zh":
        text = "".join(_edit_units(list(text), rate, rng))
        recipe.append(f"chars:{rate}")
    else:
        lines = text.split("\n")
        lines = [" ".join(_edit_units(line.split(" "), rate, rng)) if line else line for line in lines]
        text = "\n".join(lines)
        recipe.append(f"words:{rate}")
    paragraphs = text.split("\n\n")
    if len(paragraphs) > 2 and rng.random() < 0.2:
        i, j = rng.sample(range(len(paragraphs)), 2)
        paragraphs[i], paragraphs[j] = paragraphs[j], paragraphs[i]
        text = "\n\n".join(paragraphs)
        recipe.append("paragraph_swap")
    if rng.random() < 0.2:
        keep = rng.uniform(0.75, 0.97)
        text = text[: max(1, int(len(text) * keep))]
        recipe.append(f"truncate:{keep:.2f}")
    if rng.random() < 0.3:
        chrome = [rng.choice(chrome_pool) for _ in range(rng.randint(1, 3))]
        text = ("\n".join(chrome) + "\n\n" + text) if rng.random() < 0.5 else (text + "\n\n" + "\n".join(chrome))
        recipe.append(f"chrome:{len(chrome)}")
    return text, "+".join(recipe)


def _hashed_shingles(text: str):
    """The truth's shingle set of ``text`` as sorted unique 64-bit hashes of this process (a set of strings per
    document would take gigabytes; collisions ~n²/2^64)."""
    import numpy as np

    shingles = truth_shingles(text)
    return np.unique(np.fromiter((hash(s) for s in shingles), dtype=np.int64, count=len(shingles)))


def _jaccard(a, b) -> float:
    import numpy as np

    if not len(a) and not len(b):
        return 0.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def _similarity_join(hashed: list, threshold: float) -> list[tuple[int, int, float]]:
    """Every pair with Jaccard >= threshold, exactly (prefix filtering: with tokens ordered rare-first, two sets
    that similar share a token among the first |A| - ceil(t|A|) + 1 of each; then the size filter and the exact
    intersection)."""
    import numpy as np

    sets = hashed
    sizes = np.array([len(h) for h in hashed])
    values, counts = np.unique(np.concatenate(hashed), return_counts=True)
    order = np.lexsort((values, counts))  # rare first, ties by value
    rank_of = np.empty(len(values), dtype=np.int64)
    rank_of[order] = np.arange(len(values))
    ranked = [np.sort(rank_of[np.searchsorted(values, h)]) for h in hashed]
    prefix_tokens, prefix_docs = [], []
    for doc, tokens in enumerate(ranked):
        if len(tokens):
            prefix = len(tokens) - math.ceil(threshold * len(tokens)) + 1
            prefix_tokens.append(tokens[:prefix])
            prefix_docs.append(np.full(prefix, doc))
    tokens = np.concatenate(prefix_tokens)
    docs = np.concatenate(prefix_docs)
    by_token = np.lexsort((docs, tokens))
    tokens, docs = tokens[by_token], docs[by_token]
    starts = np.flatnonzero(np.concatenate(([True], tokens[1:] != tokens[:-1])))
    ends = np.concatenate((starts[1:], [len(tokens)]))
    n = len(sets)
    codes = []
    for lo, hi in zip(starts.tolist(), ends.tolist()):
        if hi - lo < 2:
            continue
        group = docs[lo:hi]
        a, b = np.triu_indices(len(group), 1)
        codes.append(group[a].astype(np.int64) * n + group[b])
    if not codes:
        return []
    candidates = np.unique(np.concatenate(codes))
    first, second = candidates // n, candidates % n
    small, large = np.minimum(sizes[first], sizes[second]), np.maximum(sizes[first], sizes[second])
    keep = small >= threshold * large
    out = []
    for a, b in zip(first[keep].tolist(), second[keep].tolist()):
        inter = len(np.intersect1d(hashed[a], hashed[b], assume_unique=True))
        jaccard = inter / (sizes[a] + sizes[b] - inter)
        if jaccard >= threshold:
            out.append((a, b, float(jaccard)))
    return out


def build_large_set(path: Path) -> Path:
    """The larger set (see the module docstring); returns the path of its records (pairs alongside)."""
    pairs_path = Path(str(path).replace(".jsonl.gz", "_pairs.tsv.gz"))
    stamp = path.with_suffix(".version")
    if path.exists() and pairs_path.exists() and stamp.exists() and stamp.read_text() == str(LARGE_VERSION):
        return path
    source = SHARED / "corpora/real_text_sample.jsonl.gz"
    originals = load_records(str(source))
    rng = random.Random(18)
    chrome_pool = [line.strip() for rec in originals[::7] for line in rec["text"].split("\n")[:2]
                   if 10 <= len(line.strip()) <= 120]
    records = []
    for index, rec in enumerate(originals):
        records.append({"id": f"o{index}", "text": rec["text"], "cluster_id": index, "family_id": index,
                        "source": rec["source"], "kind": "orig", "edit": "", "lang": rec["lang"]})
    copies = []
    for index, rec in enumerate(originals):
        units = len(truth_units(rec["text"]))
        n_copies = (units >= 30) + (units >= 300) + (units >= 1500)
        for k in range(n_copies):
            text, recipe = _edit(rec["text"], rec["lang"], rng, chrome_pool)
            copies.append({"id": f"c{index}_{k}", "text": text, "cluster_id": index, "family_id": index,
                           "source": rec["source"], "kind": "syn", "edit": recipe, "lang": rec["lang"]})
    records += copies
    rng.shuffle(records)  # originals and copies interleaved, as a crawl would deliver them
    shingles = [_hashed_shingles(r["text"]) for r in records]
    by_id = {r["id"]: s for r, s in zip(records, shingles)}
    for rec in copies:
        rec["jaccard_to_original"] = round(_jaccard(by_id[f"o{rec['cluster_id']}"], by_id[rec["id"]]), 4)
    pairs = _similarity_join(shingles, 0.5)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    with gzip.open(pairs_path, "wt", encoding="utf-8") as fh:
        fh.write("id_a\tid_b\tjaccard\tsame_cluster\n")
        for a, b, j in pairs:
            ra, rb = records[a], records[b]
            fh.write(f"{ra['id']}\t{rb['id']}\t{j:.4f}\t{int(ra['cluster_id'] == rb['cluster_id'])}\n")
    stamp.write_text(str(LARGE_VERSION))
    return path


# ---------------------------------------------------------------- the baselines (run as subprocesses)


def baseline_shingles(text: str) -> list[bytes]:
    """The shingles a careful user feeds datasketch / rensa: the truth's, as UTF-8 bytes."""
    return [s.encode("utf-8") for s in truth_shingles(text)]


def run_baseline(method: str, data: str, out: str) -> None:
    """Stream the documents, sketch, index, query, verify, union-find, write {id, cluster, kept} lines."""
    ids, sketches = [], []
    if method == "datasketch":
        from datasketch import MinHash, MinHashLSH

        lsh = MinHashLSH(threshold=0.8, num_perm=128)

        def sketch(shingles):
            m = MinHash(num_perm=128)
            m.update_batch(shingles)
            return m

        def similar(a, b):
            return a.jaccard(b) >= 0.8
    elif method == "rensa":
        _add_rensa_path()
        from rensa import RMinHash, RMinHashLSH

        lsh = RMinHashLSH(threshold=0.8, num_perm=128, num_bands=16)

        def sketch(shingles):
            m = RMinHash(num_perm=128, seed=42)
            m.update(shingles)
            return m

        def similar(a, b):
            return a.jaccard(b) >= 0.8
    else:
        raise ValueError(method)
    with gzip.open(data, "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            shingles = baseline_shingles(rec["text"])
            ids.append(rec["id"])
            if not shingles:
                sketches.append(None)
                continue
            m = sketch(shingles)
            lsh.insert(len(sketches), m)
            sketches.append(m)
    parent = list(range(len(ids)))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for index, m in enumerate(sketches):
        if m is None:
            continue
        for other in lsh.query(m):
            if other != index and similar(m, sketches[other]):
                ra, rb = find(index), find(other)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
    with open(out, "w", encoding="utf-8") as fh:
        for index, doc_id in enumerate(ids):
            root = find(index)
            fh.write(json.dumps({"id": doc_id, "cluster": ids[root], "kept": root == index}) + "\n")


# ---------------------------------------------------------------- measuring a subprocess


class PeakRss:
    """Peak resident memory of a process tree (summed), sampled every 20 ms."""

    def __init__(self, pid: int):
        import psutil

        self._proc = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import psutil

        while not self._stop.is_set():
            try:
                procs = [self._proc] + self._proc.children(recursive=True)
                total = 0
                for p in procs:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
                self.peak = max(self.peak, total)
            except psutil.Error:
                pass
            self._stop.wait(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def measure(cmd: list[str], log_path: str) -> dict:
    """Run ``cmd``; wall time, CPU time of it and its (reaped) descendants, peak RSS."""
    # A child's ru_maxrss starts from this process's own peak (Linux copies the RSS high-water mark at fork and
    # keeps it through exec), so it is only the child's own when it exceeds ours; below that the 20 ms samples
    # are the measure (building the large set once made every method read as this process's 2 GB).
    own_peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open(log_path, "w") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        with PeakRss(proc.pid) as rss:
            _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{Path(log_path).read_text()[-3000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": max(rss.peak / 2**20, usage.ru_maxrss / 1024 if usage.ru_maxrss > own_peak_kb else 0)}


def read_clusters(path: str) -> tuple[dict, set]:
    clusters, kept = {}, set()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            clusters[row["id"]] = row["cluster"]
            if row["kept"]:
                kept.add(row["id"])
    return clusters, kept


def methods(variants: bool) -> list[tuple[str, str, list[str]]]:
    """(key, description, command tail) of every method; a command tail of ``["baseline", m]`` is a baseline."""
    cli = ["-m", "cli.main", "dedup"]
    out = [
        ("datasketch", "datasketch 2.0, MinHash.update_batch + MinHashLSH(0.8), est. J >= 0.8", ["baseline", "datasketch"]),
        ("rensa", "rensa 0.5.0 (Rust), RMinHash + RMinHashLSH(0.8, 16 bands), verified J >= 0.8", ["baseline", "rensa"]),
        ("memory", "corpusmill dedup (defaults: in-memory path, in this process, no Beam)", cli),
        ("memory_beam", "corpusmill dedup, the same in-memory path on Beam's in-process runner (--runner inprocess)",
         cli + ["--runner", "inprocess"]),
        ("beam", "corpusmill dedup, Beam path, 2 workers (mode=beam --workers 2)",
         cli + ["--set", "near_dedup.mode=beam", "--workers", "2"]),
        ("beam_dask", "corpusmill dedup, Beam path on a 2-worker Dask LocalCluster (mode=beam --runner dask)",
         cli + ["--set", "near_dedup.mode=beam", "--workers", "2", "--runner", "dask"]),
    ]
    if variants:
        out += [
            ("compat", "corpusmill, datasketch-compatible signatures (scheme=affine32, shingle_hash=sha1)",
             cli + ["--set", "near_dedup.scheme=affine32", "--set", "near_dedup.shingle_hash=sha1"]),
            ("rank", "corpusmill, rank-order stars (resolution=rank)", cli + ["--set", "near_dedup.resolution=rank"]),
            ("simhash", "corpusmill, SimHash (6 blocks, <= 3 bits), exact verify", cli + ["--set", "near_dedup.method=simhash"]),
            ("estimated", "corpusmill, verify=estimated", cli + ["--set", "near_dedup.verify=estimated"]),
        ]
    return out


def command(tail: list[str], data: str, out: str) -> list[str]:
    if tail[0] == "baseline":
        return [sys.executable, str(Path(__file__).resolve()), "--run-baseline", tail[1], data, out]
    return [sys.executable, *tail[:3], data, "--out", out, *tail[3:]]


# rensa is a benchmark-only dependency, never the product's: installed outside the product environment, e.g.
#   .venv/bin/python -m pip install --target /tmp/rensa_pkgs rensa==0.5.0
# and found through $RENSA_DIR (default /tmp/rensa_pkgs), added to sys.path only if that folder exists.
RENSA_DIR = os.environ.get("RENSA_DIR", "/tmp/rensa_pkgs")


def _add_rensa_path() -> None:
    if os.path.isdir(RENSA_DIR) and RENSA_DIR not in sys.path:
        sys.path.append(RENSA_DIR)


def rensa_available() -> bool:
    _add_rensa_path()
    try:
        import rensa  # noqa: F401
    except ImportError:
        print(f"bench_dedup: rensa is MISSING (not importable, RENSA_DIR={RENSA_DIR}): the rensa rows are skipped. "
              f"Install it outside the product environment: {sys.executable} -m pip install --target {RENSA_DIR} "
              f"{RENSA}", file=sys.stderr)
        return False
    version = getattr(sys.modules["rensa"], "__version__", None)
    if version is None:
        from importlib import metadata

        try:
            version = metadata.version("rensa")
        except metadata.PackageNotFoundError:
            version = "?"
    print(f"bench_dedup: rensa {version} from {os.path.dirname(sys.modules['rensa'].__file__)}", file=sys.stderr)
    return True


# ---------------------------------------------------------------- profile (py-spy)

_ND = "transforms/near_dedup/"
PROFILE_STAGES = [  # the innermost frame matching a pattern decides a sample's stage
    ("import (interpreter, Beam, numpy)", ["_find_and_load"]),
    ("reading (gzip, JSON, doc records)", ["beamio/read.py"]),
    ("tokenization (NFKC, lower case, word classes)",
     [f"{f} ({_ND}" for f in ("_normalized", "_lower_code_points", "_code_points", "_classes", "_runs",
                              "_bmp_classes", "tokenize", "shingle_units")] + [f"shingle_sets ({_ND}minhash"]),
    ("word and shingle hashing", [f"{f} ({_ND}" for f in ("_span_hashes", "_combine", "_word_batch", "_cjk_text",
                                                          "_doc_shingles", "shingle_hashes", "word_hashes",
                                                          "_word_hash64", "shingle_hashes_sha1")]
     + [f"shingles ({_ND}core"]),
    ("signatures (permutations)", [f"signatures ({_ND}minhash", f"signature ({_ND}minhash",
                                   f"signature ({_ND}core", f"signatures ({_ND}core", f"simhash ({_ND}",
                                   f"to_hash32 ({_ND}"]),
    ("band keys", [f"{f} ({_ND}" for f in ("band_key_matrix", "band_hash_matrix", "bucket_key_matrix",
                                           "bucket_keys", "band_keys", "_new_bands")]),
    ("sketch bookkeeping", [f"sketch_batch ({_ND}", f"sketch ({_ND}core", f"_flush ({_ND}beam",
                            f"to_wire ({_ND}", f"from_wire ({_ND}", f"process ({_ND}beam.py"]),
    ("candidate edges", [f"{f} ({_ND}" for f in ("star_edge_arrays", "star_edges", "_bucket_edges",
                                                 "_probe_from_center")]),
    ("verification (estimates, exact Jaccard)", [f"{f} ({_ND}" for f in ("verify_edge_arrays", "verify_edge",
                                                                         "exact_jaccard", "_agreement",
                                                                         "_verify_probes")]
     + [f"get ({_ND}core"]),
    ("connected components", [f"{f} ({_ND}" for f in ("component_labels", "connected_components", "_large_star",
                                                      "_small_star", "_component_label", "_both_directions",
                                                      "_crossing_labels", "_merge_labels", "_final_label")]),
    ("star resolution", [f"{f} ({_ND}" for f in ("resolve_component", "_resolve_pair", "_resolve_incremental",
                                                 "similar", "_resolve", "_resolve_all", "dedup_in_memory",
                                                 "_label_sketch")] + [f"__init__ ({_ND}core"]),
    ("decisions, routing", [f"decide ({_ND}", f"_decide ({_ND}", f"_index_rows ({_ND}", "_RouteFn",
                            "beam_step.py"]),
    ("writing the clusters", ["_cluster_lines", "filebasedsink", "textio", "atomic_output",
                              "<genexpr> (/work/main/pipelines/dedup_beam.py"]),
    ("Beam: coders, (de)serialization", ["coder_impl", "coders.py", "pickle", "cloudpickle", "dill"]),
    ("Beam: graph construction", ["apply (", "_apply_internal", "to_runner_api", "from_runner_api", "expand (",
                                  "translations.py", "get_dofn_specs"]),
]
# Leaf frames of threads that wait (py-spy counts some of them as active): locks, queues, polling, children.
_IDLE_LEAVES = {"Condition.wait", "Event.wait", "Semaphore.acquire", "Queue.get", "wait", "_wait_once", "_try_wait",
                "Popen.wait", "Popen._wait", "Popen._try_wait", "channel_spin", "_serve", "select", "poll", "sleep",
                "acquire", "BaseSelector.select", "EpollSelector.select", "Thread.run",
                "_run_channel_spin_thread.<locals>.channel_spin"}


def _idle(frames: list[str]) -> bool:
    return frames[-1].startswith("process ") or frames[-1].split(" (")[0] in _IDLE_LEAVES


def _stage(frames: list[str]) -> str:
    for frame in reversed(frames):
        for stage, patterns in PROFILE_STAGES:
            if any(p in frame for p in patterns):
                return stage
    return "Beam: runner, data channels, shuffles (other)"


def profile_stages(raw_path: str) -> dict[str, float]:
    """Share of non-idle samples per stage in a py-spy raw (collapsed) profile."""
    counts: collections.Counter = collections.Counter()
    for line in open(raw_path, encoding="utf-8"):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        frames = stack.split(";")
        if not stack or _idle(frames):
            continue
        counts[_stage(frames)] += int(n)
    total = sum(counts.values()) or 1
    return {stage: round(n / total, 4) for stage, n in counts.most_common()}


def run_profile(data: str, tails: list[tuple[str, list[str]]]) -> dict:
    pyspy = Path(sys.executable).with_name("py-spy")
    if not pyspy.exists():
        print("bench_dedup: --profile needs py-spy (pip install py-spy)", file=sys.stderr)
        return {}
    out = {}
    for key, tail in tails:
        with tempfile.TemporaryDirectory() as tmp:
            raw = os.path.join(tmp, "profile.txt")
            cmd = [str(pyspy), "record", "-r", "200", "-f", "raw", "-o", raw, "--subprocesses", "--",
                   *command(tail, data, os.path.join(tmp, "clusters.jsonl"))]
            measured = measure(cmd, os.path.join(tmp, "log.txt"))
            out[key] = {"stages": profile_stages(raw), "wall_s": round(measured["wall_s"], 2)}
    return out


# ---------------------------------------------------------------- main


def bench_set(name: str, data: str, pairs_path: str, methods_list, reps: int) -> dict:
    records, pairs = load_records(data), load_pairs(pairs_path)
    n = len(records)
    chars = sum(len(r["text"]) for r in records)
    print(f"\n== {name}: {data} ({n} docs, {chars / n:.0f} chars/doc, {len(pairs)} pairs with J >= 0.5)", flush=True)
    runs: dict[str, list[dict]] = collections.defaultdict(list)
    quality: dict[str, dict] = {}
    first_clusters: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(reps):
            for key, _, tail in methods_list:
                out = os.path.join(tmp, f"{key}.jsonl")
                measured = measure(command(tail, data, out), os.path.join(tmp, f"{key}.log"))
                clusters, kept = read_clusters(out)
                if key not in quality:
                    quality[key] = score(clusters, kept, records, pairs)
                    first_clusters[key] = clusters
                measured["same_clusters_as_first_run"] = clusters == first_clusters[key]
                runs[key].append(measured)
                print(f"  rep {rep} {key:10s} wall {measured['wall_s']:7.2f} s  cpu {measured['cpu_s']:7.2f} s  "
                      f"rss {measured['peak_rss_mb']:6.0f} MB", flush=True)
    rows = []
    for key, description, _ in methods_list:
        r = runs[key]
        wall, cpu = statistics.median(x["wall_s"] for x in r), statistics.median(x["cpu_s"] for x in r)
        rows.append({"method": key, "description": description, "docs": n, "runs": len(r),
                     "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                     "docs_per_s": round(n / wall, 1), "docs_per_cpu_s": round(n / cpu, 1),
                     "peak_rss_mb": round(statistics.median(x["peak_rss_mb"] for x in r)),
                     "wall_s_all": [round(x["wall_s"], 2) for x in r], "cpu_s_all": [round(x["cpu_s"], 2) for x in r],
                     "deterministic": all(x["same_clusters_as_first_run"] for x in r), **quality[key]})
    by_key = {row["method"]: row for row in rows}
    for row in rows:  # ratios of medians, and the median of the per-repetition ratios
        for base in ("datasketch", "rensa"):
            if base not in by_key:
                continue
            b = by_key[base]
            row[f"x_{base}_wall"] = round(b["wall_s"] / row["wall_s"], 2)
            row[f"x_{base}_cpu"] = round(b["cpu_s"] / row["cpu_s"], 2)
            row[f"x_{base}_rss"] = round(row["peak_rss_mb"] / b["peak_rss_mb"], 2)
            row[f"x_{base}_wall_per_rep"] = round(statistics.median(
                x["wall_s"] / y["wall_s"] for x, y in zip(runs[base], runs[row["method"]])), 2)
            row[f"x_{base}_cpu_per_rep"] = round(statistics.median(
                x["cpu_s"] / y["cpu_s"] for x, y in zip(runs[base], runs[row["method"]])), 2)
    return {"set": name, "data": data, "docs": n, "chars_per_doc": round(chars / n), "pairs_j05": len(pairs),
            "rows": rows}


def print_tables(result: dict) -> None:
    print(f"\n### {result['set']}: {result['docs']} docs, {result['chars_per_doc']} chars/doc")
    print("\n| method | docs/s (wall) | docs/CPU-s | wall s | CPU s | peak RSS MB | × datasketch wall / CPU (per-rep median) "
          "| × rensa CPU | RSS / datasketch | F1 / P / R exact-J≥0.8 | F1 cluster truth | pairs J<0.5 | clusters lost "
          "| residual J≥0.8 pairs | recall by J bin (0.5–0.6 … 0.9–1.0) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in result["rows"]:
        e, c = r["exact_j08"], r["cluster_truth"]
        bins = " / ".join("-" if v is None else f"{v:.3f}" for v in r["recall_by_jaccard_bin"].values())
        print(f"| {r['description']} | {r['docs_per_s']} | {r['docs_per_cpu_s']} | {r['wall_s']} | {r['cpu_s']} | "
              f"{r['peak_rss_mb']} | {r.get('x_datasketch_wall', '-')} / {r.get('x_datasketch_cpu', '-')} "
              f"({r.get('x_datasketch_wall_per_rep', '-')} / {r.get('x_datasketch_cpu_per_rep', '-')}) | "
              f"{r.get('x_rensa_cpu', '-')} | {r.get('x_datasketch_rss', '-')} | "
              f"{e['f1']:.3f} / {e['precision']:.3f} / {e['recall']:.3f} | {c['f1']:.3f} | {r['pairs_below_j05']} | "
              f"{r['truth_clusters_lost']} | {r['residual_dup_pairs_j08']} | {bins} |")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--run-baseline":
        run_baseline(*sys.argv[2:5])
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="dev,large", help="comma-separated: dev, large")
    parser.add_argument("--dev", default=str(SHARED / "eval/dedup_dev.jsonl.gz"))
    parser.add_argument("--large", default=str(OUT_DIR / "dedup_large.jsonl.gz"))
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions of every method")
    parser.add_argument("--variants", action="store_true", help="also the corpusmill variants (one more run each)")
    parser.add_argument("--only", help="comma-separated method keys to run")
    parser.add_argument("--profile", action="store_true", help="py-spy profile of corpusmill (both paths)")
    parser.add_argument("--out", default=str(OUT_DIR / "dedup.json"))
    args = parser.parse_args()
    have_rensa = rensa_available()
    sets = {}
    for name in args.sets.split(","):
        if name == "dev":
            if not os.path.exists(args.dev):
                print(f"bench_dedup: {args.dev} not found (the dev set lives in ../shared/eval/)", file=sys.stderr)
                return 2
            sets["dev"] = args.dev
        elif name == "large":
            sets["large"] = str(build_large_set(Path(args.large)))
        else:
            parser.error(f"unknown set {name!r}")
    chosen = methods(args.variants)
    if args.only:
        keep = set(args.only.split(","))
        chosen = [m for m in chosen if m[0] in keep]
    if not have_rensa:
        chosen = [m for m in chosen if m[0] != "rensa"]
    results = {"cpus": os.cpu_count(), "load_avg_start": os.getloadavg(), "sets": []}
    for name, data in sets.items():
        pairs = data.replace(".jsonl.gz", "_pairs.tsv.gz")
        result = bench_set(name, data, pairs, chosen, args.reps)
        if args.profile:
            result["profile"] = run_profile(data, [(k, t) for k, _, t in chosen if k in ("memory", "beam")])
        results["sets"].append(result)
    results["load_avg_end"] = os.getloadavg()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    for result in results["sets"]:
        print_tables(result)
        for key, prof in result.get("profile", {}).items():
            print(f"\nprofile {result['set']} / {key} (share of non-idle py-spy samples, {prof['wall_s']} s wall):")
            for stage, share in prof["stages"].items():
                print(f"  {stage:48s} {100 * share:5.1f} %")
    print(f"\nload average: start {results['load_avg_start']}, end {results['load_avg_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
