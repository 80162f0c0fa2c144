"""The commands' shared plumbing: one section loader, one reader, failures classified by exception type."""
from __future__ import annotations

import importlib.util
import json

import pytest

from cli.prepare import failure
from runio.errors import ExitCode
from pipelines.config import ConfigError, InputConfig, load_config, load_section, param_overrides
from pipelines.prepare import AccountingError
from beamio.read import Quarantined, iter_records, read_file
from pipelines.run import StageFailed
from transforms.near_dedup import NearDedupConfig
from transforms.pii import PiiConfig
from transforms.quality.model import QualityTrainConfig


def _config(tmp_path, sections: dict):
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps({"name": "r", "input": {"paths": ["x.jsonl"]}, **sections}), encoding="utf-8")
    return path


def test_load_section_reads_the_file_then_applies_overrides(tmp_path):
    path = _config(tmp_path, {"near_dedup": {"threshold": 0.6, "num_perm": 64}})
    cfg = load_section(path, "near_dedup", NearDedupConfig, ["near_dedup.threshold=0.9", "dedup.seed=8"],
                       aliases=("dedup",))
    assert (cfg.threshold, cfg.num_perm, cfg.seed) == (0.9, 64, 8)
    assert load_section(None, "near_dedup", NearDedupConfig) == NearDedupConfig()
    # a dotted section is a section inside a section; typed values are not parsed as YAML ("on" stays a string)
    train = load_section(_config(tmp_path, {"quality": {"train": {"epoch": 3}}}), "quality.train",
                         QualityTrainConfig, param_overrides("quality.train", ["dim=16"]))
    assert (train.epoch, train.dim) == (3, 16)
    assert load_section(None, "pii", PiiConfig, values={"ner": "on"}).ner == "on"


def test_load_section_errors_name_the_field_in_load_configs_format(tmp_path):
    with pytest.raises(ConfigError) as whole:
        load_config(_config(tmp_path, {"near_dedup": {"verify": "sometimes"}}))
    with pytest.raises(ConfigError) as section:
        load_section(None, "near_dedup", NearDedupConfig, ["near_dedup.verify=sometimes"])
    assert str(section.value) == str(whole.value)
    assert str(section.value).startswith("invalid configuration:\n  near_dedup.verify: must be one of")
    with pytest.raises(ConfigError, match=r"near_dedup.nope: unknown key"):
        load_section(None, "near_dedup", NearDedupConfig, ["near_dedup.nope=1"])
    with pytest.raises(ConfigError, match=r"only near_dedup.KEY=VALUE \(or dedup.KEY=VALUE\) applies here"):
        load_section(None, "near_dedup", NearDedupConfig, ["quality.threshold=1"], aliases=("dedup",))
    with pytest.raises(ConfigError, match="config file not found"):
        load_section(tmp_path / "missing.yaml", "pii", PiiConfig)
    with pytest.raises(ConfigError, match=r"--param 'epoch': expected KEY=VALUE"):
        param_overrides("quality.train", ["epoch"])


def test_iter_records_is_the_pipelines_reader_without_beam(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "one", "doc": 1}\n\n{broken\n{"text": 5}\n[1]\n{"text": "two"}\n', encoding="utf-8")
    cfg = InputConfig(paths=[str(tmp_path)])
    items = list(iter_records(cfg))
    assert [item for _, _, item in items] == list(read_file(str(src), cfg))
    assert [(index, item.kind if isinstance(item, Quarantined) else item["text"]) for _, index, item in items] == [
        (0, "one"), (2, "invalid_json"), (3, "text_not_a_string"), (4, "not_an_object"), (5, "two")]
    assert {path for path, _, _ in items} == {str(src)}
    with pytest.raises(ConfigError, match="no file matches"):
        list(iter_records(InputConfig(paths=[str(tmp_path / "nothing-*.jsonl")])))


def test_failures_are_classified_by_exception_type():
    def raised(inner: BaseException, outer: BaseException, explicit: bool = True) -> BaseException:
        try:
            try:
                raise inner
            except BaseException as err:
                if explicit:
                    raise outer from err
                raise outer
        except BaseException as err:
            return err

    code, cause = failure(raised(ConfigError("quality.model: m.bin does not exist"), RuntimeError("wrapped")))
    assert code == ExitCode.CONFIG and isinstance(cause, ConfigError) and str(cause).startswith("quality.model")
    # an error raised while handling a ConfigError is not a configuration error
    assert failure(raised(ConfigError("x.y: bad"), RuntimeError("cleanup failed"), explicit=False))[0] == ExitCode.FAILED
    assert failure(AccountingError("accounting does not balance"))[0] == ExitCode.ACCOUNTING
    assert failure(StageFailed("training failed"))[0] == ExitCode.REFUSED
    # the in-process runner re-raises a worker's exception, with the step's name, while handling it
    code, reason = failure(raised(OSError(27, "File too large", "/r/docs/x.parquet"),
                                  RuntimeError("OSError: [Errno 27] File too large [while running 'WriteDocs']"),
                                  explicit=False))
    assert (code, reason) == (ExitCode.FAILED, "OSError: File too large (/r/docs/x.parquet)")
    # a worker in another process reports its exception only as the text of its traceback
    remote = RuntimeError('Pipeline failed\nTraceback (most recent call last):\n  File "x.py", line 1, in f\n'
                          '    write()\nRuntimeError: OSError: [Errno 28] No space left on device '
                          "[while running 'WriteDocs']\n")
    assert failure(remote) == (ExitCode.FAILED, "OSError: [Errno 28] No space left on device [while running 'WriteDocs']")
    assert failure(ValueError("bad value\nmore"))[1] == "ValueError: bad value"
    assert failure(MemoryError())[1] == "MemoryError"


def test_the_commands_live_in_cli():
    assert importlib.util.find_spec("pipelines.cli") is None
    from cli.main import build_parser

    actions = build_parser()._subparsers._group_actions[0].choices
    assert {"run", "prepare", "refresh", "train", "inspect", "tokenizer", "pii", "dedup", "report", "resume",
            "quality"} <= set(actions)


def test_commands_check_a_step_like_the_run_does(tmp_path, capsys):
    """`pii.ner: on` without its model fails before any document is read: exit 2, one message naming the field."""
    from cli.main import main

    src = tmp_path / "in.jsonl"
    src.write_text('{"id": 1, "text": "Call Jane Doe at 555-123-4567."}\n', encoding="utf-8")
    config = tmp_path / "pii.yaml"
    config.write_text("pii:\n  ner_model: no_such_spacy_model\n", encoding="utf-8")
    out = tmp_path / "spans.jsonl"
    assert main(["pii", str(src), "--out", str(out), "--config", str(config), "--ner", "on"]) == 2
    err = capsys.readouterr().err
    assert "pii.ner: 'on' needs the spaCy model 'no_such_spacy_model'" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert main(["pii", str(src), "--out", str(out), "--config", str(config), "--ner", "off"]) == 0
    assert json.loads(out.read_text(encoding="utf-8"))["id"] == 1


# The analysis commands, each as a user runs it: (argv before --out/--config, with INPUT in place of the input).
ANALYSIS_COMMANDS = (["dedup", "INPUT"], ["pii", "INPUT", "--ner", "off"], ["quality", "score", "INPUT"])


def _analysis_argv(command: list[str], source, *rest: str) -> list[str]:
    return [str(source) if word == "INPUT" else word for word in command] + list(rest)


def test_analysis_commands_check_the_whole_config_as_prepare_does(tmp_path, capsys):
    """A misspelt section of --config is prepare's unknown-key error in every analysis command (exit 2, naming
    each key), not its defaults used in silence; the command's own section is checked with its --set applied."""
    from cli.main import main

    source = tmp_path / "in.jsonl"
    source.write_text('{"id": "a", "text": "Call John at 555-123-4567 tomorrow please, he is waiting."}\n',
                      encoding="utf-8")
    typo = tmp_path / "typo.yaml"
    typo.write_text(json.dumps({"name": "x", "input": {"paths": [str(source)]}, "pii_": {"operator": "mask"},
                                "near_dedupe": {"threshold": 0.1}, "qualty": {"threshold": 0.99}}),
                    encoding="utf-8")
    assert main(["prepare", str(typo)]) == 2
    expected = capsys.readouterr().err.split(": ", 1)[1]  # after "corpusmill prepare: "
    assert "pii_: unknown key" in expected and "qualty: unknown key" in expected
    out = tmp_path / "out.jsonl"
    for command in ANALYSIS_COMMANDS:
        assert main(_analysis_argv(command, source, "--out", str(out), "--config", str(typo))) == 2, command
        err = capsys.readouterr().err
        assert err.split(": ", 1)[1] == expected, command
        assert not out.exists()
    # a key of another section is checked too; a file without name and input is a config for these commands
    other = tmp_path / "other.yaml"
    other.write_text(json.dumps({"normalize": {"unicode_fom": "NFC"}}), encoding="utf-8")
    for command in ANALYSIS_COMMANDS:
        assert main(_analysis_argv(command, source, "--out", str(out), "--config", str(other))) == 2, command
        assert "normalize.unicode_fom: unknown key" in capsys.readouterr().err
    # the command's own section is validated with the command's overrides (a value --set corrects is no error)
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(json.dumps({"near_dedup": {"threshold": 2}}), encoding="utf-8")
    assert main(["dedup", str(source), "--out", str(out), "--config", str(fixed)]) == 2
    assert "near_dedup.threshold" in capsys.readouterr().err
    assert main(["dedup", str(source), "--out", str(out), "--config", str(fixed),
                 "--set", "near_dedup.threshold=0.8"]) == 0
    assert json.loads(out.read_text(encoding="utf-8")) == {"id": "a", "cluster": "a", "kept": True}


def test_analysis_commands_read_the_fields_the_config_names(tmp_path, capsys):
    """A --config whose input section names the text and id fields is read with them (the flags still win):
    its documents are not all quarantined for want of a 'text' field."""
    from cli.main import main

    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"doc": f"d{i}", "content": f"Call John at 555-123-456{i} tomorrow, "
                                          f"he is waiting for the parcel number {i}."}) + "\n" for i in range(3)),
                      encoding="utf-8")
    config = tmp_path / "fields.yaml"
    config.write_text(json.dumps({"input": {"paths": [str(source)], "text_field": "content", "id_field": "doc"}}),
                      encoding="utf-8")
    out = tmp_path / "out.jsonl"
    for command in ("dedup", "pii"):
        assert main([command, str(source), "--out", str(out), "--config", str(config)]) == 0, command
        assert [json.loads(line)["id"] for line in out.read_text(encoding="utf-8").splitlines()] == ["d0", "d1", "d2"]
    capsys.readouterr()
    assert main(["dedup", str(source), "--out", str(out), "--config", str(config), "--text-field", "text"]) == 1
    assert "all 3 records were quarantined" in capsys.readouterr().err


def test_analysis_commands_refuse_an_out_they_cannot_write_before_any_work(tmp_path, capsys):
    """--out that is a folder, or under a file: one line naming it, exit 2, before the input is read, a model
    loaded or trained (never a traceback after the work)."""
    from cli.main import main

    source = tmp_path / "in.jsonl"
    source.write_text('{"id": "a", "text": "Some words to read here."}\n', encoding="utf-8")
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "a-file").write_text("x\n", encoding="utf-8")
    for out, says in ((tmp_path / "a-folder", "is a directory"),
                      (tmp_path / "a-file" / "out.jsonl", f"{tmp_path / 'a-file'} is not a directory"),
                      (tmp_path / "a-file" / "deeper" / "out.jsonl", f"{tmp_path / 'a-file'} is not a directory")):
        for command in ANALYSIS_COMMANDS:
            # (quality score: a --model that does not exist would be the next error, so none is trained here)
            extra = ["--model", str(tmp_path / "missing.bin")] if command[0] == "quality" else []
            assert main(_analysis_argv(command, source, "--out", str(out), *extra)) == 2, (command, out)
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"--out {out}: " in err and says in err, (command, err)
            assert "engine" not in err and "Traceback" not in err
    assert (tmp_path / "a-file").read_text(encoding="utf-8") == "x\n"


@pytest.mark.parametrize("command", [["dedup", "INPUT"], ["quality", "score", "INPUT"], ["pii", "INPUT"]])
def test_a_count_of_zero_is_an_error_not_the_default(tmp_path, capsys, command):
    from cli.main import main

    option = "--batch-size" if command[0] == "pii" else "--workers"
    with pytest.raises(SystemExit) as done:
        main(_analysis_argv(command, tmp_path / "in.jsonl", "--out", str(tmp_path / "o.jsonl"), option, "0"))
    assert done.value.code == 2
    assert f"argument {option}: expected a whole number ≥ 1, got 0" in capsys.readouterr().err
