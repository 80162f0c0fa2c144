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
