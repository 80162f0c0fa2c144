"""`corpusmill dedup`: one line per input document with the reported id, its cluster and whether it is kept."""
import gzip
import json
from pathlib import Path

from cli.main import main

DEMO_CORPUS = Path(__file__).resolve().parents[1] / "data/demo/corpus.jsonl.gz"


def _write_input(path: Path) -> list[dict]:
    with gzip.open(DEMO_CORPUS, "rt", encoding="utf-8") as fh:
        texts = [r["text"] for r in map(json.loads, fh) if r["lang"] == "en" and len(r["text"]) > 1500][:8]
    records = [{"id": f"doc-{i}", "text": t, "source": "demo"} for i, t in enumerate(texts)]
    records += [{"id": "copy-of-2", "text": texts[2] + "\n\nShare this page"},
                {"id": "copy-of-5", "text": texts[5].replace(" the ", " a ", 3)}]
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")
        fh.write("{not json\n")  # quarantined by the reader, never a crash
    return records


def test_dedup_command_writes_one_line_per_document(tmp_path, capsys):
    records = _write_input(tmp_path / "in.jsonl.gz")
    out = tmp_path / "clusters.jsonl"
    code = main(["dedup", str(tmp_path / "in.jsonl.gz"), "--out", str(out), "--runner", "inprocess",
                 "--set", "near_dedup.threshold=0.8", "--set", "dedup.resolution=rank"])
    assert code == 0
    rows = {row["id"]: row for row in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert set(rows) == {r["id"] for r in records}
    # ids are hashes of the input position, so either member of a pair may be the kept one
    for original, copy in (("doc-2", "copy-of-2"), ("doc-5", "copy-of-5")):
        pair = [rows[original], rows[copy]]
        assert rows[original]["cluster"] == rows[copy]["cluster"] in (original, copy)
        assert sorted(r["kept"] for r in pair) == [False, True]
        assert all(r["kept"] == (r["cluster"] == r["id"]) for r in pair)
    others = [f"doc-{i}" for i in range(8) if i not in (2, 5)]
    assert all(rows[i] == {"id": i, "cluster": i, "kept": True} for i in others)
    # the kind and the first record's place and reason are named, not only counted
    assert "1 quarantined (invalid_json: 1; first: in.jsonl.gz record 11: not valid JSON" in capsys.readouterr().err


def test_dedup_command_reports_bad_settings_by_name(tmp_path, capsys):
    _write_input(tmp_path / "in.jsonl.gz")
    code = main(["dedup", str(tmp_path / "in.jsonl.gz"), "--out", str(tmp_path / "o.jsonl"),
                 "--set", "near_dedup.verify=sometimes"])
    assert code == 2 and "near_dedup.verify" in capsys.readouterr().err
    code = main(["dedup", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o.jsonl")])
    assert code == 2 and "missing.jsonl" in capsys.readouterr().err
    code = main(["dedup", str(tmp_path / "in.jsonl.gz"), "--out", str(tmp_path / "o.jsonl"), "--set", "quality.x=1"])
    assert code == 2 and "near_dedup.KEY" in capsys.readouterr().err
    # records whose text is under another name: every one quarantined is a failure that names the option
    (tmp_path / "body.jsonl").write_text("".join(json.dumps({"id": i, "body": f"text number {i}"}) + "\n"
                                                 for i in range(3)), encoding="utf-8")
    for extra in ([], ["--runner", "inprocess"]):
        assert main(["dedup", str(tmp_path / "body.jsonl"), "--out", str(tmp_path / "o.jsonl"), *extra]) == 1
        assert "all 3 records were quarantined; is the text in another field than 'text'? (--text-field)" in (
            capsys.readouterr().err)
    assert main(["dedup", str(tmp_path / "body.jsonl"), "--out", str(tmp_path / "o.jsonl"),
                 "--text-field", "body"]) == 0


def test_the_in_memory_path_runs_in_this_process_and_the_beam_path_on_workers():
    from pipelines.dedup_beam import local_runner
    from transforms.near_dedup import NearDedup, NearDedupConfig

    args = dict(runner="direct", workers=None)
    assert local_runner(NearDedup(NearDedupConfig(), input_bytes=10_000), **args) == ("inprocess", 1)
    assert local_runner(NearDedup(NearDedupConfig(mode="beam"), input_bytes=10_000), **args) == ("direct", None)
    big = NearDedup(NearDedupConfig(memory_max_input_bytes=100), input_bytes=10_000)  # auto → beam
    assert local_runner(big, **args) == ("direct", None)
    assert local_runner(NearDedup(NearDedupConfig(), input_bytes=10), runner="direct", workers=2) == (
        "direct", 2)  # an explicit --workers is kept


def test_the_local_in_memory_path_runs_without_beam_and_gives_the_beam_clusters(tmp_path, capsys):
    from pipelines.dedup import Execution, runs_without_beam
    from transforms.near_dedup import NearDedup, NearDedupConfig

    def _runs_without_beam(cfg, input_bytes, args: dict) -> bool:
        return runs_without_beam(cfg, input_bytes, Execution(args["runner"], args["workers"],
                                                             beam_args=tuple(args["beam_args"])),
                                 args["index_out"], args["against"])

    records = _write_input(tmp_path / "in.jsonl.gz")
    rows = {}
    beam_path = ["--runner", "inprocess", "--set", "near_dedup.mode=beam"]
    said = {"beam": "components on one worker, the in-memory path",
            # the size of the last, single-worker label merge: cc_max_rounds' trade-off
            "rounds": "0 label pairs in the last component merge after 1 star rounds"}
    for name, extra in (("local", []), ("beam", ["--runner", "inprocess"]), ("rounds", beam_path)):
        out = tmp_path / f"{name}.jsonl"
        assert main(["dedup", str(tmp_path / "in.jsonl.gz"), "--out", str(out), *extra]) == 0
        err = capsys.readouterr().err
        assert "1 quarantined (invalid_json: 1; first: in.jsonl.gz record 11" in err
        assert ("in this process" in err) == (name == "local")
        assert name == "local" or said[name] in err, err  # where each path found the components
        rows[name] = sorted(out.read_text(encoding="utf-8").splitlines())
    assert rows["local"] == rows["beam"] == rows["rounds"] and len(rows["local"]) == len(records)
    assert sum('"kept": false' in line for line in rows["local"]) == 2
    plain = dict(runner="direct", workers=None, index_out=None, against=[], beam_args=[])
    assert _runs_without_beam(NearDedupConfig(), 10_000, plain)
    for change in ({"runner": "inprocess"}, {"workers": 2}, {"index_out": "x"}, {"against": ["y"]},
                   {"beam_args": ["--direct_num_workers=2"]}):
        assert not _runs_without_beam(NearDedupConfig(), 10_000, {**plain, **change})
    for cfg, size in ((NearDedupConfig(mode="beam"), 10_000), (NearDedupConfig(memory_max_input_bytes=100), 10_000),
                      (NearDedupConfig(enabled=False), 10)):
        assert not _runs_without_beam(cfg, size, plain)
    from transforms.near_dedup.core import chosen_path

    for cfg, size in ((NearDedupConfig(mode="beam"), 10), (NearDedupConfig(mode="memory"), 10**12),
                      (NearDedupConfig(memory_max_input_bytes=100), 10_000), (NearDedupConfig(), 10_000)):
        assert chosen_path(cfg, size) == NearDedup(cfg, input_bytes=size).path()


def test_the_local_path_imports_no_beam(tmp_path):
    import subprocess
    import sys

    _write_input(tmp_path / "in.jsonl.gz")
    code = ("import sys; from cli.main import main; "
            f"rc = main(['dedup', {str(tmp_path / 'in.jsonl.gz')!r}, '--out', {str(tmp_path / 'o.jsonl')!r}]); "
            "print('BEAM' if 'apache_beam' in sys.modules else 'NOBEAM'); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("NOBEAM")
    assert len((tmp_path / "o.jsonl").read_text().splitlines()) == 10


def test_the_local_path_refuses_duplicate_ids(tmp_path, capsys):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"id": f"d{i}", "text": f"some words here number {i} and more"}) + "\n"
                            for i in range(3)), encoding="utf-8")
    from transforms.near_dedup.core import check_unique_ids

    check_unique_ids([1, 2, 3])
    import pytest

    with pytest.raises(ValueError, match="occurs more than once"):
        check_unique_ids([1, 2, 1])
    assert main(["dedup", str(path), "--out", str(tmp_path / "o.jsonl")]) == 0
    assert len((tmp_path / "o.jsonl").read_text().splitlines()) == 3


def test_a_second_input_is_deduplicated_against_the_first_ones_index(tmp_path, capsys):
    """`--index-out` then `--against`: a near copy of a document kept by the earlier run is removed, its cluster
    named as being in that run; the earlier documents are not read again and never removed."""
    records = _write_input(tmp_path / "in.jsonl.gz")
    index = tmp_path / "index"
    assert main(["dedup", str(tmp_path / "in.jsonl.gz"), "--out", str(tmp_path / "first.jsonl"),
                 "--index-out", str(index)]) == 0, capsys.readouterr().err
    later = tmp_path / "later.jsonl"
    later.write_text(json.dumps({"id": "late-copy-of-3", "text": records[3]["text"] + "\n\nPosted in News"}) + "\n"
                     + json.dumps({"id": "late-new", "text": "An unrelated short note about the weather today."})
                     + "\n", encoding="utf-8")
    out = tmp_path / "second.jsonl"
    assert main(["dedup", str(later), "--out", str(out), "--against", str(index)]) == 0, capsys.readouterr().err
    rows = {row["id"]: row for row in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert set(rows) == {"late-copy-of-3", "late-new"}
    assert rows["late-new"] == {"id": "late-new", "cluster": "late-new", "kept": True}
    copy = rows["late-copy-of-3"]
    assert copy["kept"] is False and copy["cluster_in_earlier_run"] is True


def test_an_index_out_that_cannot_be_a_new_index_is_refused_before_any_work(tmp_path, capsys):
    """An index is written whole into a new folder: a file, a folder holding files (an earlier index's parts
    would be read back with the new ones), the --against folder itself, an unwritable place: one line, exit 2,
    no output written."""
    _write_input(tmp_path / "in.jsonl.gz")
    index = tmp_path / "index"
    out = tmp_path / "o.jsonl"
    assert main(["dedup", str(tmp_path / "in.jsonl.gz"), "--out", str(out), "--index-out", str(index)]) == 0
    capsys.readouterr()
    (tmp_path / "a_file").write_text("x")
    cases = {str(index): "the folder already holds files", str(tmp_path / "a_file"): "is a file",
             str(tmp_path / "a_file" / "idx"): "is not a directory"}
    for path, said in cases.items():
        out.unlink(missing_ok=True)
        assert main(["dedup", str(tmp_path / "in.jsonl.gz"), "--out", str(out), "--index-out", path]) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()
    assert main(["dedup", str(tmp_path / "in.jsonl.gz"), "--out", str(out), "--against", str(index),
                 "--index-out", str(index)]) == 2
    assert "is also an input of this run" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()  # an empty folder is a new one
    assert main(["dedup", str(tmp_path / "in.jsonl.gz"), "--out", str(out), "--index-out",
                 str(tmp_path / "empty")]) == 0
    assert (tmp_path / "empty" / "index_params.json").exists()


def test_a_folder_of_text_files_is_reported_by_file_and_a_copied_file_as_removed(tmp_path, capsys):
    """Text files have no id field: their lines name the file. A file byte-identical to another is read once
    (its document has the same id) but still gets its line, removed for what the file it copies is kept as or
    removed for; a copy of an empty file is quarantined as the original is."""
    with gzip.open(DEMO_CORPUS, "rt", encoding="utf-8") as fh:
        texts = [r["text"] for r in map(json.loads, fh) if r["lang"] == "en" and len(r["text"]) > 1500][:4]
    folder = tmp_path / "pages"
    folder.mkdir()
    for i, text in enumerate(texts):
        (folder / f"page{i}.txt").write_text(text, encoding="utf-8")
    (folder / "page1-edited.txt").write_text(texts[1] + "\n\nShare this page", encoding="utf-8")
    (folder / "z-page2-copy.txt").write_text(texts[2], encoding="utf-8")
    (folder / "z-page1-edited-copy.txt").write_text(texts[1] + "\n\nShare this page", encoding="utf-8")
    (folder / "blank.txt").write_text("  \n", encoding="utf-8")
    (folder / "blank-copy.txt").write_text("  \n", encoding="utf-8")
    results = {}
    for name, extra in (("local", []), ("beam", ["--runner", "inprocess", "--set", "near_dedup.mode=beam"])):
        out = tmp_path / f"{name}.jsonl"
        assert main(["dedup", str(folder), "--out", str(out), *extra]) == 0
        err = capsys.readouterr().err
        assert "7 documents, 4 kept, 3 removed as near-duplicates, 2 quarantined (empty_text: 2" in err
        rows = {row["id"]: row for row in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
        results[name] = rows
        assert set(rows) == {f"page{i}.txt" for i in range(4)} | {"page1-edited.txt", "z-page2-copy.txt",
                                                                   "z-page1-edited-copy.txt"}
        assert rows["z-page2-copy.txt"] == {"id": "z-page2-copy.txt", "cluster": "page2.txt", "kept": False}
        head = rows["page1.txt"]["cluster"]  # ids are hashes: either of the near pair may be the kept one
        assert head in ("page1.txt", "page1-edited.txt") and rows[head]["kept"]
        assert rows["page1-edited.txt"]["cluster"] == rows["z-page1-edited-copy.txt"]["cluster"] == head
        assert not rows["z-page1-edited-copy.txt"]["kept"]
        assert sum(r["kept"] for r in rows.values()) == 4
    assert results["local"] == results["beam"]
