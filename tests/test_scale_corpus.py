"""The scale benchmark's corpus growing (benchmarks/scale_corpus.py): the requested size, no identical texts."""
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from scale_corpus import edit_text, grow, host_documents, read_jsonl, write_corpus  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "data/demo/corpus.jsonl.gz"


def _base():
    docs = [{**d, "id": d["url"]} for d in read_jsonl(str(DEMO))[:120]]
    # two identical texts in the base: the grown corpus must still hold each text once
    return docs + [{**docs[0], "id": "dup-of-first"}]


def test_grown_corpus_has_requested_size_and_no_identical_texts():
    base = _base()
    base_bytes = sum(len(d["text"].encode()) for d in base)
    target = 3 * base_bytes
    docs = grow(base, target, fresh_share=0.5, seed=0)
    size = sum(len(d["text"].encode()) for d in docs)
    assert target <= size <= target + max(len(d["text"].encode()) for d in docs)
    assert len({d["text"] for d in docs}) == len(docs)
    assert len({d["id"] for d in docs}) == len(docs)
    copies = [d for d in docs if "~edit" in d["id"]]
    assert copies and sum(len(d["text"].encode()) for d in copies) >= 0.4 * target
    originals = {d["id"]: d["text"] for d in base}
    for copy in copies[:50]:
        assert copy["text"] != originals[copy["id"].split("~edit")[0]]


def test_smaller_size_is_a_prefix_of_the_fresh_text_of_a_larger():
    base = _base()
    small = [d["id"] for d in grow(base, 200_000, seed=3) if "~edit" not in d["id"]]
    large = [d["id"] for d in grow(base, 800_000, seed=3) if "~edit" not in d["id"]]
    assert large[:len(small)] == small


def test_edit_text_changes_english_and_chinese_at_about_the_rate():
    rng = random.Random(0)
    english = " ".join(f"word{i}" for i in range(2000))
    edited = edit_text(english, 0.1, rng, ["other"])
    changed = sum(a != b for a, b in zip(english.split(), edited.split()))
    assert edited != english and changed > 50
    chinese = "天地玄黄宇宙洪荒日月盈昃辰宿列张" * 100
    assert edit_text(chinese, 0.01, rng, ["字"]) != chinese


def test_write_corpus_round_robin(tmp_path):
    docs = grow(_base(), 100_000, seed=1)
    paths = write_corpus(docs, str(tmp_path), files=3)
    back = [d for p in paths for d in read_jsonl(p)]
    assert len(paths) == 3 and sorted(d["id"] for d in back) == sorted(d["id"] for d in docs)


def test_write_corpus_gives_the_same_bytes_each_time(tmp_path, monkeypatch):
    """Document ids come from the input file's checksum: a rewritten corpus must keep its bytes (no gzip
    timestamp), or two benchmark invocations would keep different documents of each near-duplicate cluster."""
    import hashlib
    import time

    docs = grow(_base(), 50_000, seed=1)
    first = [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in write_corpus(docs, str(tmp_path / "a"), 2)]
    monkeypatch.setattr(time, "time", lambda: 2_000_000_000.0)  # what gzip would otherwise stamp into the header
    again = [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in write_corpus(docs, str(tmp_path / "a"), 2)]
    assert first == again
    assert not list((tmp_path / "a").glob("*.tmp"))


def test_host_documents_do_not_depend_on_where_the_virtual_environment_lies(tmp_path):
    """A site-packages file's document id names it from site-packages on: the same environment reached by
    another path (a checkout's .venv symlink) gives the same documents, so the same corpus bytes and ids."""
    site = tmp_path / "env" / "lib" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "README.md").write_text("A package's own documentation, long enough to be a document. " * 8)
    (tmp_path / "checkout").mkdir()
    (tmp_path / "checkout" / ".venv").symlink_to(tmp_path / "env")
    direct = list(host_documents(roots=(), site_packages=str(site)))
    via_link = list(host_documents(roots=(), site_packages=str(tmp_path / "checkout/.venv/lib/site-packages")))
    assert [d["id"] for d in direct] == ["host/site-packages/pkg/README.md"]
    assert direct == via_link
