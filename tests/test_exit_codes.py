"""One exit-code scheme (runio.errors.ExitCode): each number means one thing, whichever command returns it."""
from __future__ import annotations

import re
from pathlib import Path

from cli.prepare import failure
from pipelines.prepare import AccountingError
from pipelines.run import StageFailed, _run_stage
from runio.errors import CorpusmillError, ExitCode
from trainer_bridge.outcomes import TRAIN_FAILURE_CODES, TrainingStopped, TrainRefused, outcome_of

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("runio", "pipelines", "transforms", "tokenizer", "beam_dask", "trainer_bridge", "experiments", "report",
            "cli", "benchmarks")


def test_every_code_has_one_name_and_accounting_shares_no_trainer_code():
    assert len(ExitCode.__members__) == len(set(ExitCode))  # no aliases: a number is one meaning
    trainer_codes = {*TRAIN_FAILURE_CODES, ExitCode.OK, ExitCode.INTERRUPTED, ExitCode.TERMINATED}
    assert ExitCode.ACCOUNTING not in trainer_codes
    assert outcome_of(TrainingStopped("stopped at step 3"))[0] == ExitCode.STOPPED != ExitCode.ACCOUNTING


def test_run_ends_a_trainer_stop_and_an_accounting_failure_with_different_codes(monkeypatch):
    import trainer_bridge.launch as launch

    def stopped_by_the_guards(cfg, *, from_scratch=False, outcome=print):
        outcome("stopped at step 3: 3 bad steps in a row")
        return ExitCode.STOPPED

    monkeypatch.setattr(launch, "run_training", stopped_by_the_guards)
    try:
        _run_stage(object(), None, "train", (), print)
    except StageFailed as stage_failed:
        trainer_stop = failure(stage_failed)
    else:
        raise AssertionError("a stopped training must fail the train stage")
    accounting = failure(AccountingError("accounting does not balance"))
    assert trainer_stop[0] == ExitCode.STOPPED and accounting[0] == ExitCode.ACCOUNTING
    assert trainer_stop[0] != accounting[0]


def test_an_error_carries_its_code():
    assert TrainRefused("x").exit_code == ExitCode.REFUSED and isinstance(TrainRefused("x"), CorpusmillError)
    assert CorpusmillError("x").exit_code == ExitCode.FAILED


def test_no_module_defines_exit_codes_of_its_own():
    constant = re.compile(r"^\s*EXIT_[A-Z_]+\s*=|EXIT_[A-Z]+, *EXIT", re.MULTILINE)
    found = [str(path.relative_to(ROOT)) for package in PACKAGES for path in (ROOT / package).rglob("*.py")
             if constant.search(path.read_text(encoding="utf-8"))]
    assert found == []


def test_the_cli_handler_ends_an_error_with_its_code_and_one_line(monkeypatch, capsys):
    import argparse

    import cli.main

    def refused(_args):
        raise TrainRefused("step-00000004 was trained with a different configuration")

    def parser(_modules=()):
        built = argparse.ArgumentParser(prog="corpusmill")
        built.add_argument("-v", "--verbose", action="store_true")
        built.add_subparsers(dest="command").add_parser("refusing").set_defaults(handler=refused)
        return built

    monkeypatch.setattr(cli.main, "build_parser", parser)
    assert cli.main.main(["refusing"]) == ExitCode.REFUSED
    assert capsys.readouterr().err == "corpusmill refusing: step-00000004 was trained with a different configuration\n"
