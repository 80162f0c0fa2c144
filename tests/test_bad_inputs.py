"""Bad inputs found by probing the reader as a user would (probe7): each ends as a quarantine record with a
readable reason or a one-line error naming the file, never a traceback that fails the whole run."""
from __future__ import annotations

from beamio.config_base import InputConfig
from beamio.read import Quarantined, read_file


def _read(path):
    return list(read_file(str(path), InputConfig(paths=[str(path)])))


def test_a_json_line_nested_too_deeply_is_quarantined_not_a_failed_run(tmp_path):
    """json.loads raises RecursionError (not JSONDecodeError) past ~1000 nested arrays: one such line used to fail
    the whole clean (exit 5, RecursionError); it is one invalid_json record, and the lines around it are read."""
    path = tmp_path / "deep.jsonl"
    path.write_text('{"text": "before"}\n{"text": "x", "m": ' + "[" * 5000 + "]" * 5000 + '}\n{"text": "after"}\n',
                    encoding="utf-8")
    before, bad, after = _read(path)
    assert before["text"] == "before" and after["text"] == "after"
    assert isinstance(bad, Quarantined) and bad.kind == "invalid_json" and bad.position == 2
    assert "nested too deeply" in bad.reason


def test_a_json_string_line_is_described_in_words(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('"just a string"\n', encoding="utf-8")
    [bad] = _read(path)
    assert bad.kind == "not_an_object" and bad.reason == "JSON value is a string, not an object"


def test_linked_folders_are_read_and_link_loops_are_walked_once(tmp_path):
    """A corpus folder assembled from links to folders elsewhere used to be read as holding none of their files
    (os.walk does not follow links), without a word; a link back up (a loop) is not walked round."""
    from beamio.read import resolve_inputs

    elsewhere = tmp_path / "disk2" / "crawl"
    elsewhere.mkdir(parents=True)
    (elsewhere / "part.jsonl").write_text('{"text": "linked"}\n', encoding="utf-8")
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "own.jsonl").write_text('{"text": "own"}\n', encoding="utf-8")
    (corpus / "crawl").symlink_to(elsewhere, target_is_directory=True)
    (corpus / "sub" / "up").symlink_to("..", target_is_directory=True)  # a loop
    assert [f.name for f in resolve_inputs([str(corpus)])] == ["crawl/part.jsonl", "own.jsonl"]


def test_an_input_file_that_cannot_be_read_is_one_config_error_naming_it(tmp_path, capsys):
    """A dangling link or a link loop in an input folder failed the run with a bare OSError (exit 5, traceback
    in error.log); it is a one-line configuration error naming the file (exit 2)."""
    from cli.main import main

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.jsonl").write_text('{"text": "fine"}\n', encoding="utf-8")
    (corpus / "loop.jsonl").symlink_to("loop.jsonl")
    code = main(["dedup", str(corpus), "--out", str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, (code, err)
    assert f"input file '{corpus / 'loop.jsonl'}' cannot be read (OSError: Too many levels of symbolic links)" in err


def test_bad_config_files_are_one_line_exit_2(tmp_path, capsys):
    """A config saved as UTF-16 or Latin-1 ended in a UnicodeDecodeError traceback (exit 1); a YAML syntax error
    was said over seven lines; a key given twice was read as the last one without a word; a folder was 'not
    found'. Each is one line naming the file and what is wrong, exit 2."""
    from cli.main import main

    files = {"latin1.yaml": ("name: caf\xe9\n".encode("latin-1"), "is not UTF-8 text (byte 0xe9 at offset 9)"),
             "syntax.yaml": (b"name: a\ninput: {paths: [x]\noutput: {}\n",
                             "is not valid YAML: expected ',' or '}', but got '<scalar>' at line 3, column 1"),
             "twice.yaml": (b"name: a\ninput: {paths: [x]}\nname: b\n",
                            "is not valid YAML: key 'name' is given twice in one mapping at line 3, column 1")}
    for name, (data, said) in files.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "folder.yaml").mkdir()
    files["folder.yaml"] = (None, "is a folder, not a config file")
    for name, (_, said) in files.items():
        code = main(["prepare", str(tmp_path / name)])
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1 and said in err, (name, code, err)


def test_yaml_merge_keys_may_still_override():
    """`<<: *anchor` then a key the anchor has is an override, not a key given twice."""
    import yaml

    from beamio.config_base import _UniqueKeyLoader

    text = "base: &b {steps: 1, lr: 0.1}\ntrain: {<<: *b, steps: 2}\n"
    assert yaml.load(text, Loader=_UniqueKeyLoader) == {"base": {"steps": 1, "lr": 0.1},
                                                         "train": {"steps": 2, "lr": 0.1}}


def test_a_file_where_the_run_directory_goes_is_a_config_error_naming_the_field(tmp_path, capsys):
    """output.runs_dir naming a file ended as 'failed: NotADirectoryError ... not writable', exit 5."""
    from cli.main import main

    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "a"}\n', encoding="utf-8")
    (tmp_path / "afile").write_text("", encoding="utf-8")
    config = tmp_path / "c.yaml"
    config.write_text(f"name: r\ninput: {{paths: ['{corpus}']}}\noutput: {{runs_dir: '{tmp_path / 'afile'}'}}\n",
                      encoding="utf-8")
    code = main(["prepare", str(config)])
    err = capsys.readouterr().err
    assert code == 2 and f"output.runs_dir: {tmp_path / 'afile'} is a file, not a folder" in err, (code, err)
    assert not (tmp_path / "afile").stat().st_size


def test_a_damaged_gzip_member_inside_a_warc_is_said_to_be_corrupt_not_truncated(tmp_path):
    """Bytes damaged inside a .warc.gz (a bad disk or copy; the file is whole) were reported as truncated_file,
    'the file ends inside a gzip member ... truncated, or still being written': the wrong cause, sending the user
    to re-download. It is unreadable_file naming the corrupt member's offset; records before it are read."""
    import zlib
    from pathlib import Path

    from beamio.read import InputFile, read_file_indexed

    data = bytearray((Path(__file__).parent / "data" / "raw" / "pages.warc.gz").read_bytes())
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        member.decompress(bytes(data[pos:]))
        pos = len(data) - len(member.unused_data)
    damaged_member = starts[len(starts) // 2]
    for k in range(damaged_member + 12, damaged_member + 40):
        data[k] ^= 0xFF
    path = tmp_path / "damaged.warc.gz"
    path.write_bytes(bytes(data))
    items = list(read_file_indexed(str(path), InputConfig(paths=[str(path)]), InputFile.of(str(path))))
    bad = [item for _, item in items if type(item) is Quarantined]
    assert [q.kind for q in bad] == ["unreadable_file"] and bad[0].byte_offset == damaged_member, bad
    assert "is corrupt" in bad[0].reason and "truncated" not in bad[0].reason
    assert len(items) == len(starts) // 2 + 1  # every record before the damaged member, then the one record


def test_nan_and_infinity_in_a_jsonl_record_reach_meta_as_null(tmp_path):
    """Python's json.dumps writes NaN and Infinity; they reached the docs' meta column as `{"score":NaN}`, which
    is not JSON. They are null, as a Parquet cell's NaN is."""
    import json

    path = tmp_path / "nan.jsonl"
    path.write_text('{"text": "a", "score": NaN, "hi": Infinity, "lo": [-Infinity, 1.5]}\n', encoding="utf-8")
    [doc] = _read(path)
    assert doc["meta"] == {"score": None, "hi": None, "lo": [None, 1.5]}
    json.dumps(doc["meta"], allow_nan=False)


def test_a_compressed_parquet_file_says_it_is_not_read_compressed(tmp_path):
    """A .parquet.gz was opened as Parquet and quarantined as 'not a readable Parquet file: ArrowInvalid', which
    does not say why; it is unsupported_file, 'decompress it first', as a compressed .pdf or .docx is."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    plain = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": ["a"]}), plain)
    packed = tmp_path / "t.parquet.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    [bad] = _read(packed)
    assert bad.kind == "unsupported_file" and bad.reason == "a compressed .parquet is not read: decompress it first"


def test_a_dask_address_with_no_scheduler_is_one_config_error_naming_it():
    """`--runner dask --dask-address tcp://127.0.0.1:1` failed the clean as 'failed: CancelledError' (exit 5)."""
    import pytest

    from beam_dask.cluster import connect, cluster_threads
    from beamio.config_base import ConfigError

    with pytest.raises(ConfigError, match=r"^--dask-address tcp://127\.0\.0\.1:1: no dask scheduler answered "
                                          r"\(Timed out trying to connect"):
        connect("127.0.0.1:1", timeout="1s")
    assert cluster_threads("tcp://127.0.0.1:1", timeout="1s") is None


def test_trace_refuses_a_run_without_its_manifest_instead_of_answering_not_found(tmp_path, capsys):
    """A prepare that failed half-way leaves the run directory without manifest.json; trace answered every query
    'not found: ... is not an input of this run' (exit 0): a false answer to a takedown request."""
    from cli.main import main

    run = tmp_path / "runs" / "r"
    (run / "docs").mkdir(parents=True)
    code = main(["trace", str(run), "--source", "a.jsonl:1"])
    out, err = capsys.readouterr()
    assert code == 4 and "no manifest.json: the run's last clean did not complete" in err and "not found" not in out


def test_a_markdown_file_opening_with_a_rule_keeps_its_first_paragraph(tmp_path):
    """`---`, a paragraph, `---` (a rule and a setext heading) was taken for YAML front matter, and, as YAML reads
    the paragraph as a string, not a mapping, the paragraph was dropped without a word. Front matter is a mapping
    (or empty); anything else is the document's text."""
    essay = tmp_path / "essay.md"
    essay.write_text("---\nThe opening paragraph, after a rule.\n---\n\nThe second part.\n", encoding="utf-8")
    [doc] = _read(essay)
    assert doc["text"] == "The opening paragraph, after a rule.\n\nThe second part."
    titled = tmp_path / "titled.md"
    titled.write_text("---\ntitle: Notes\n---\nBody.\n", encoding="utf-8")
    [doc] = _read(titled)
    assert doc["text"] == "Body." and doc["meta"]["title"] == "Notes"
