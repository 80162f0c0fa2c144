"""Running stages into a run directory: one lock, checks first, resumable at stage granularity.

`prepare` = clean → shards; `refresh` = the same against earlier runs; `run` = clean → shards → train → report.

**Checks first.** Everything a late stage needs that can be checked without doing the work (the cleaning steps'
models, ``tokenizer.path``, ``train.init_from``, the inputs, ``--against``) is checked before the first stage
starts, so a wrong late-stage key costs seconds, not a clean (``preflight``).

**Per-stage fingerprints.** Each stage's fingerprint covers the config keys it reads and its upstream: the
previous stage's fingerprint and a digest of that stage's outputs (the inputs' sha256 for the clean, the shard
manifest's sha256 for the shards). ``manifest.json`` records, per stage done, its fingerprint and the settings it
ran with (``stages``). A stage whose fingerprint still matches is kept (``run`` skips it); one that no longer
matches is re-run, and only the stages after it follow: changing ``tokenizer.*`` rebuilds the shards and
retrains, never the clean. What a changed config must never do silently is discard or misuse expensive
results, so a different *cleaning* config is refused (exit 2) unless ``--overwrite`` is given (which discards
exactly the outputs that changed and those after them). A change that rebuilds the shards a trained model was
trained on never resumes that model on them (as the trainer refuses to): ``run`` trains anew on the new shards,
saying so in one line, with the old checkpoints set aside in ``train/set-aside-*`` (nothing deleted);
``prepare``/``refresh``, which would leave the model on shards it never saw, refuse it (exit 4).
``--from-scratch`` trains anew in any case.

**Changed inputs are not silently kept.** A resumed ``run`` keeps a clean done before only while its local input
files are the ones it read (``changed_inputs``: sizes and mtimes as recorded in ``inputs_stat``, else compared by
sha256); other content is refused like a changed cleaning config (``--overwrite`` cleans again).

**Empty results are results.** When no document survives the clean (an empty input, all of it quarantined, a
refresh whose every new document is a duplicate or whose every input was seen before), the shards and training
are skipped with a one-line reason, the manifest says ``"empty": true`` with the counts, and the run completes
(exit 0): shards/ and tokenizer/ are then absent.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from beamio.read import ID_SCHEME, expand_inputs
from lineage.card import refresh_data_cards
from pipelines.config import ConfigError, RunConfig
from pipelines.prepare import base_manifest, previously_processed, run_clean, run_shards, summary_table
from pipelines.runners import release_slurm_jobs
from pipelines.rundir import clear_outputs, read_manifest, remove_stale_temporaries
from pipelines.steps import StepContext, check_steps
from runio.cost import StageMeter, record_stage
from runio.errors import ExitCode
from runio.files import is_uri, read_json, read_jsonl, sha256_bytes, sha256_file, write_atomic, write_json
from runio.layout import RunPaths
from runio.ledger import LedgerError
from runio.pushgateway import push_cost, push_pipeline_stats
from tokenizer.shards import ShardFormatError
from tokenizer.train import check_tokenizer
from trainer_bridge.outcomes import TRAIN_FAILURE_CODES
from transforms.pii import engine_description

DATA_STAGES = ("clean", "shards")
# Keys that change how fast a stage runs, how much it checks, when training runs or where its checkpoints are
# copied, never its outputs: not fingerprinted, so changing one never invalidates a run (``train.verify_shards``
# only decides how the trainer checks the shards it reads).
SPEED_ONLY_KEYS = ("packing.encode_batch_docs", "packing.encode_batch_bytes", "train.verify_shards",
                   "train.schedule.windows", "train.schedule.timezone", "train.schedule.outside",
                   "train.checkpoint.tiers")
EMPTY_REASON = "no document survived cleaning"


class StageFailed(RuntimeError):
    """A stage ended without its result, or was refused; the message is the one-line reason for cron/systemd
    logs, ``code`` the command's exit code (4 unless the stage's own command said otherwise: the train stage
    exits as ``corpusmill train`` would, 2–5)."""

    def __init__(self, message: str, code: int = 4):
        super().__init__(message)
        self.code = code


@contextmanager
def run_lock(paths: RunPaths) -> Iterator[None]:
    """An exclusive lock on the run directory; the OS drops it if the process dies, so no stale locks."""
    paths.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            raise ConfigError(f"{paths} is locked by {holder}: another corpusmill command is running on it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        yield
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------ checks first


def _check_tokenizer(cfg: RunConfig) -> None:
    try:
        check_tokenizer(cfg.tokenizer, cfg.packing)
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(str(err)) from None


def _check_init_from(cfg: RunConfig) -> None:
    spec = cfg.train.init_from
    if not spec:
        return
    if spec.startswith("hf:"):
        if not os.path.exists(spec[3:]):
            raise ConfigError(f"train.init_from: {spec[3:]} does not exist (hf: names a Hugging Face model folder)")
        return
    source = RunPaths(spec)
    if not source.root.is_dir():
        raise ConfigError(f"train.init_from: {spec} does not exist (it names the run directory whose newest "
                          f"sound checkpoint starts this training)")
    if not source.checkpoints.is_dir() or not any(source.checkpoints.iterdir()):
        raise ConfigError(f"train.init_from: {spec} holds no checkpoints ({source.checkpoints} is missing or "
                          f"empty)")


def _check_distill(cfg: RunConfig) -> None:
    """``train.distill.teacher`` exists (its fit to the student is checked when training starts)."""
    if cfg.train.distill is None:
        return
    spec = cfg.train.distill.teacher
    path = spec[3:] if spec.startswith("hf:") else spec
    if not os.path.isdir(path):
        raise ConfigError(f"train.distill.teacher: {path} does not exist (a run directory, or hf: and a Hugging "
                          "Face model folder)")
    if not spec.startswith("hf:") and not RunPaths(spec).checkpoints.is_dir():
        raise ConfigError(f"train.distill.teacher: {spec} holds no checkpoints ({RunPaths(spec).checkpoints})")


def _check_model_fits_rows(cfg: RunConfig) -> None:
    """A model context shorter than the rows the shards stage packs: the trainer would refuse them, after the
    clean and the shards."""
    max_seq_len = cfg.train.model.max_seq_len
    if max_seq_len is not None and max_seq_len < cfg.packing.seq_len:
        raise ConfigError(f"train.model.max_seq_len ({max_seq_len}) < packing.seq_len ({cfg.packing.seq_len}): the "
                          f"model cannot take the rows the shards stage packs; set packing.seq_len to at most "
                          f"{max_seq_len} or train.model.max_seq_len to at least {cfg.packing.seq_len}")


def _check_run_directory(cfg: RunConfig) -> None:
    """The run directory's place: a file where output.runs_dir (or the run directory, or a folder above it) should
    be is a setting that cannot work, named; it used to end in a NotADirectoryError said as 'not writable' (exit
    5) after the checks."""
    run_dir = RunPaths.of(cfg).root.absolute()
    for place in (run_dir, *run_dir.parents):
        if place.exists():
            if not place.is_dir():
                field = "name" if place == run_dir else "output.runs_dir"
                raise ConfigError(f"{field}: {place} is a file, not a folder: the run directory {run_dir} cannot "
                                  f"be made there")
            return


def preflight(cfg: RunConfig, stages: tuple[str, ...], against: tuple[str, ...] = ()) -> None:
    """What can refuse the run, checked before anything is written, cheapest first; a ConfigError naming the
    field (exit 2). Late stages first: they are the ones that would otherwise fail after hours of cleaning."""
    _check_run_directory(cfg)
    if "shards" in stages:
        _check_tokenizer(cfg)
    if "train" in stages:
        _check_init_from(cfg)
        _check_distill(cfg)
        if "shards" in stages:
            _check_model_fits_rows(cfg)
    if "clean" in stages:
        if against:
            previously_processed(against)  # a bad --against, before touching anything
        expand_inputs(cfg.input.paths)  # a path that matches nothing
        check_steps(cfg, StepContext(RunPaths.of(cfg), tuple(RunPaths(run) for run in against)))


# ------------------------------------------------------------------------------------------------- stages


# Builds report.html of a run directory from its ``report`` config section: ``report.build.build_report``,
# which the command running the report stage passes in (report sits on a floor above pipelines).
ReportBuilder = Callable[[RunPaths, Any], Path]


@dataclass(frozen=True)
class StageRun:
    """What a stage's ``run`` is given. ``build_report``: the report builder (``report.build.build_report``),
    supplied by the caller, a floor above this one (the CLI), for a run with the report stage."""
    cfg: RunConfig
    paths: RunPaths
    against: tuple[str, ...]
    log: Callable[[str], None]
    from_scratch: bool = False
    build_report: Optional[ReportBuilder] = None


def _no_settings(cfg: RunConfig, against: tuple[str, ...]) -> dict[str, Any]:
    return {}


def _no_digest(paths: RunPaths, manifest: dict) -> str | None:
    return None


def _never_skipped(manifest: dict) -> str | None:
    return None


@dataclass(frozen=True)
class Stage:
    """One stage of a run, described once; ``STAGES`` lists them in order.

    ``keys``: the config keys (dotted prefixes) its outputs depend on: a change to one re-runs it and the stages
    after it (the runner is not among them: outputs are byte-identical on any runner and number of workers; nor
    are ``SPEED_ONLY_KEYS``); ``settings(cfg, against)``: what else its fingerprint covers, as settings.
    ``outputs(paths)``: what it writes (removed when it is discarded or skipped). ``digest(paths, manifest)``:
    what the stages after it read of its outputs (part of their fingerprint), None if nothing.
    ``skip(manifest)``: why it has nothing to do (an empty result), or None. ``run(StageRun)``: does the work;
    returns what it adds to the manifest."""
    name: str
    keys: tuple[str, ...]
    outputs: Callable[[RunPaths], tuple[Path, ...]]
    run: Callable[[StageRun], dict]
    settings: Callable[[RunConfig, tuple[str, ...]], dict[str, Any]] = _no_settings
    digest: Callable[[RunPaths, dict], str | None] = _no_digest
    skip: Callable[[dict], str | None] = _never_skipped


def _clean_settings(cfg: RunConfig, against: tuple[str, ...]) -> dict[str, Any]:
    """Local input paths made absolute (their spelling is irrelevant), the earlier runs it is cleaned against, and,
    when the URL filter runs, its settings and its list files' content (an edited block list re-runs the clean)."""
    settings = {"input.paths": [_local_abspath(p) for p in cfg.input.paths],
                "against": sorted(_local_abspath(str(a)) for a in against)}
    if cfg.url_filter.active():  # only then: a run made before the URL filter existed keeps its fingerprint
        section = cfg.url_filter.model_dump(mode="json", exclude={"top_domains"})  # that one: stats.json only
        settings.update(_flatten(section, "url_filter"))
        for key in ("block_list", "allow_list"):
            path = getattr(cfg.url_filter, key)
            if path:
                settings[f"url_filter.{key}"] = _local_abspath(path)
                settings[f"url_filter.{key}_sha256"] = _file_sha256(path)
    if cfg.takedown.ledgers or cfg.takedown.near_duplicates:  # only then, as above; the run's own ledger is not
        # here: `forget` applies it to the outputs itself, so appending to it must not make the clean stale
        settings["takedown.near_duplicates"] = cfg.takedown.near_duplicates
        for index, given in enumerate(cfg.takedown.ledgers):
            settings[f"takedown.ledgers.{index}"] = _local_abspath(given)
            ledger = RunPaths(given).takedown_ledger if os.path.isdir(given) else Path(given)
            settings[f"takedown.ledgers.{index}_sha256"] = _file_sha256(str(ledger))
    return settings


def _file_sha256(path: str) -> str | None:
    """The content's sha256 of a local file, None when it cannot be read (the clean's checks then say why)."""
    try:
        return sha256_bytes(Path(path).read_bytes())
    except OSError:
        return None


def _clean_digest(paths: RunPaths, manifest: dict) -> str | None:
    """The clean's outputs are a function of its inputs' content (and its config)."""
    if "inputs" not in manifest:
        return None
    return _digest([sorted(i.get("sha256", "") for i in manifest.get("inputs", [])),
                    sorted(manifest.get("inputs_seen", []))])


def _clean_stage(run: StageRun) -> dict:
    cfg = run.cfg
    stats = run_clean(cfg, run.against, run.log)
    run.log(summary_table(stats))
    if cfg.output.pushgateway_url:
        push_pipeline_stats(stats, cfg.output.pushgateway_url, run=cfg.name, stage="clean")
    return {"inputs": stats.pop("inputs"), "inputs_seen": stats.pop("inputs_seen"),
            "inputs_stat": input_stamps(cfg), "against": list(run.against),
            "steps": [row["step"] for row in stats["steps"]], "counts": stats["accounting"],
            "pii_engine": _pii_engine(cfg)}


def _shards_settings(cfg: RunConfig, against: tuple[str, ...]) -> dict[str, Any]:
    """``tokenizer.path`` by its content's sha256."""
    path = cfg.tokenizer.path
    if not path:
        return {}
    return {"tokenizer.path": f"sha256:{sha256_file(path)}" if os.path.isfile(path) else path}


def _shards_digest(paths: RunPaths, manifest: dict) -> str | None:
    """The shards are named by their manifest (per-shard sha256 inside)."""
    shard_manifest = paths.shards_manifest
    return sha256_file(shard_manifest)[:16] if shard_manifest.is_file() else "empty"


def _empty_result(manifest: dict, what: str) -> str | None:
    if not manifest.get("empty"):
        return None
    c = manifest.get("counts", {})
    skipped = f", {c['skipped_records']} records skipped" if c.get("skipped_records") else ""
    return (f"{EMPTY_REASON} (read {c.get('read', 0)}: removed {c.get('removed', 0)}, quarantined "
            f"{c.get('quarantined', 0)}{skipped}); {what}")


def _skip_shards(manifest: dict) -> str | None:
    return _empty_result(manifest, "no shards written")


def _shards_stage(run: StageRun) -> dict:
    cfg, log = run.cfg, run.log
    shards = run_shards(cfg, log)
    totals = shards.get("totals", {})
    for split, t in sorted(totals.items()):
        if not t.get("docs"):
            log(f"shards/{split}: no document (packing.val_fraction {cfg.packing.val_fraction} of "
                f"{sum(x.get('docs', 0) for x in totals.values())} documents)" if split == "val" else
                f"shards/{split}: no document")
            continue
        log(f"shards/{split}: {t.get('docs', 0)} documents → {t.get('tokens', 0)} tokens in {t.get('rows', 0)} "
            f"rows of {shards.get('seq_len')}, fill {t.get('fill_ratio', 0):.2%}, documents split "
            f"{t.get('docs_split', 0)}")
    check = shards.get("tokenizer_check") or {}
    if check.get("by_language"):
        log("tokenizer: bytes per token " + ", ".join(
            f"{lang} {row['bytes_per_token']}" for lang, row in check["by_language"].items()))
    for warning in check.get("warnings", []):
        log(f"warning: {warning}")
    return {"shards": {"tokenizer_sha256": shards.get("tokenizer_sha256"), "totals": totals,
                       "seq_len": shards.get("seq_len"), "packing": shards.get("packing")}}


def _skip_train(manifest: dict) -> str | None:
    empty = _empty_result(manifest, "nothing to train on")
    if empty is not None:
        return empty
    rows = (manifest.get("shards", {}).get("totals", {}).get("train") or {}).get("rows", 0)
    if not rows:
        return "the train split has no rows (every document fell into the val split or has no token); " \
               "nothing to train on"
    return None


def _train_stage(run: StageRun) -> dict:
    from trainer_bridge.launch import run_training  # deferred: imports torch, which the data stages never need

    said: list[str] = []
    code = run_training(run.cfg, from_scratch=run.from_scratch, outcome=said.append)
    if code in TRAIN_FAILURE_CODES:  # the trainer's one line, as `corpusmill train` would end, naming the stage
        raise StageFailed(f"train stage failed (exit {code}): {said[-1] if said else 'see the output above'}",
                          code=code)
    if code != 0:
        raise StageFailed(f"train stage failed with exit code {code}; re-run to resume from the last checkpoint")
    write_data_cards(run.paths, run.log)
    return {}


def write_data_cards(paths: RunPaths, say: Callable[[str], None]) -> None:
    """Each checkpoint's data card (``lineage.card``), after a training ended."""
    try:
        cards = refresh_data_cards(paths.root)
    except (LedgerError, ShardFormatError, OSError) as error:  # the training stands; the cards are said missing
        say(f"data cards not written: {error}")
        return
    if cards:
        say(f"data cards: {len(cards)} checkpoint(s), newest {cards[-1]}")


def _report_stage(run: StageRun) -> dict:
    if not run.cfg.report.enabled:
        run.log("report: disabled (report.enabled: false)")
        return {}
    path = run.build_report(run.paths, run.cfg.report)
    run.log(f"report: {path}")
    return {"report": str(path)}


STAGES: tuple[Stage, ...] = (
    Stage("clean", keys=("input", "output.target_shard_bytes", "normalize", "filters", "exact_dedup", "near_dedup",
                         "quality", "pii"),
          outputs=lambda p: (p.docs, p.removed, p.quarantine, p.dedup, p.stats, p.progress, p.clean_work),
          run=_clean_stage, settings=_clean_settings, digest=_clean_digest),
    Stage("shards", keys=("tokenizer", "packing"), outputs=lambda p: (p.shards, p.tokenizer_dir),
          run=_shards_stage, settings=_shards_settings, digest=_shards_digest, skip=_skip_shards),
    Stage("train", keys=("train",), outputs=lambda p: (p.train,), run=_train_stage, skip=_skip_train),
    # its builder comes from the caller (report is a floor above pipelines): StageRun.build_report
    Stage("report", keys=("report",), outputs=lambda p: (p.report_html,), run=_report_stage),
)
STAGE = {stage.name: stage for stage in STAGES}
ALL_STAGES = tuple(STAGE)
STAGE_KEYS = {stage.name: stage.keys for stage in STAGES}
STAGE_OUTPUTS = {stage.name: stage.outputs for stage in STAGES}


def output_digest(stage: str, paths: RunPaths, manifest: dict) -> str | None:
    """What the stages after ``stage`` read of its outputs, as a digest (``Stage.digest``)."""
    return STAGE[stage].digest(paths, manifest)


def _skip_reason(stage: str, manifest: dict) -> str | None:
    """Why ``stage`` has nothing to do (an empty result), or None."""
    return STAGE[stage].skip(manifest)


def _run_stage(cfg: RunConfig, paths: RunPaths, stage: str, against: tuple[str, ...],
               log: Callable[[str], None], *, from_scratch: bool = False,
               build_report: Optional[ReportBuilder] = None) -> dict:
    return STAGE[stage].run(StageRun(cfg, paths, against, log, from_scratch, build_report))


# -------------------------------------------------------------------------------------------- fingerprints


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, child in value.items():
            out.update(_flatten(child, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _local_abspath(path: str) -> str:
    return path if is_uri(path) else os.path.abspath(path)


def stage_settings(cfg: RunConfig, stage: str, against: tuple[str, ...] = ()) -> dict[str, Any]:
    """The resolved config keys ``stage`` depends on, flattened (``section.key``), as fingerprinted: local
    input paths made absolute (spelling is irrelevant), ``tokenizer.path`` by its content's sha256."""
    flat = _flatten(cfg.model_dump(mode="json"))
    keys = STAGE_KEYS[stage]
    settings = {k: v for k, v in flat.items()
                if any(k == p or k.startswith(p + ".") for p in keys) and k not in SPEED_ONLY_KEYS}
    settings.update(STAGE[stage].settings(cfg, against))
    return settings


def _digest(value: Any) -> str:
    return sha256_bytes(json.dumps(value, sort_keys=True, default=str).encode("utf-8"))[:16]


def expected_fingerprints(cfg: RunConfig, paths: RunPaths, manifest: dict,
                          against: tuple[str, ...] = ()) -> dict[str, dict]:
    """Per stage: the fingerprint its outputs would have now (``fingerprint``), made of ``config`` (its keys)
    and ``upstream`` (the previous stage's fingerprint and output digest), and the ``settings`` themselves."""
    out: dict[str, dict] = {}
    previous = None
    for stage in ALL_STAGES:
        settings = stage_settings(cfg, stage, against)
        config = _digest(settings)
        upstream = _digest([out[previous]["fingerprint"], output_digest(previous, paths, manifest)]) if previous \
            else _digest([])
        out[stage] = {"fingerprint": _digest([config, upstream]), "config": config, "upstream": upstream,
                      "settings": settings}
        previous = stage
    return out


def _records(cfg: RunConfig, manifest: dict | None, expected: dict[str, dict]) -> dict[str, dict]:
    """The stages done according to ``manifest``: its per-stage records, or for a manifest written before
    stages had fingerprints, its whole-config fingerprint (all done stages current, or all changed)."""
    if not manifest:
        return {}
    if isinstance(manifest.get("stages"), dict):
        return {s: dict(r) for s, r in manifest["stages"].items() if s in ALL_STAGES and isinstance(r, dict)}
    same = manifest.get("config_fingerprint") == cfg.fingerprint()
    return {s: (dict(expected[s]) if same else {"fingerprint": "unknown", "config": "unknown",
                                                 "upstream": "unknown", "settings": None})
            for s in manifest.get("stages_done", []) if s in ALL_STAGES}


def _changed_keys(old: dict | None, new: dict, limit: int = 4) -> str:
    if old is None:
        return "a config written before stages had fingerprints"
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    shown = [f"{k}: {old.get(k, '(unset)')!r} → {new.get(k, '(unset)')!r}" for k in keys[:limit]]
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return (", ".join(shown) + more) if shown else "its inputs' content"


def _stage_why(stage: str, records: dict, expected: dict) -> str:
    """What changed for a stale stage: its own keys, or (named) those of the stage it depends on."""
    record = records[stage]
    if record.get("config") != expected[stage]["config"]:
        return _changed_keys(record.get("settings"), expected[stage]["settings"])
    index = ALL_STAGES.index(stage)
    for earlier in reversed(ALL_STAGES[:index]):
        if earlier in records and records[earlier].get("config") != expected[earlier]["config"]:
            return f"{earlier}: " + _changed_keys(records[earlier].get("settings"), expected[earlier]["settings"])
    return f"the outputs of {ALL_STAGES[index - 1]} changed"


def _has_training(paths: RunPaths) -> bool:
    return paths.checkpoints.is_dir() and any(paths.checkpoints.iterdir())


def plan_changes(cfg: RunConfig, paths: RunPaths, manifest: dict | None, against: tuple[str, ...], overwrite: bool,
                 log: Callable[[str], None], *, stages: tuple[str, ...] = ALL_STAGES,
                 from_scratch: bool = False, inputs_changed: str | None = None) -> tuple[dict[str, dict], bool]:
    """Decide what the stages done before keep; return the records that stay valid. Refuses (before anything is
    written) a change that would discard cleaned documents (ConfigError, exit 2) or, without the train stage
    among ``stages``, leave a trained model on shards it was not trained on (StageFailed, exit 4), unless
    ``overwrite`` is set (those outputs are removed). With the train stage among ``stages``, new shards under a
    trained model, or ``from_scratch``, make the train stage run again from step 0, and the report after it: the
    trainer sets the old checkpoints and logs aside (nothing deleted). Returns the records and whether the train
    stage starts anew. ``inputs_changed`` (what ``changed_inputs`` found) makes a clean done before stale like a
    changed cleaning config."""
    expected = expected_fingerprints(cfg, paths, manifest or {}, against)
    records = _records(cfg, manifest, expected)
    stale = [s for s in ALL_STAGES if s in records and records[s].get("fingerprint") != expected[s]["fingerprint"]]
    if inputs_changed and "clean" in records and "clean" not in stale:
        stale.insert(0, "clean")

    def _why(stage: str, records: dict, expected: dict) -> str:
        if stage == "clean" and inputs_changed and records[stage].get("config") == expected[stage]["config"]:
            return inputs_changed
        return _stage_why(stage, records, expected)

    train_on_other_shards = ("train" in stale and records["train"].get("upstream") != expected["train"]["upstream"]
                             and _has_training(paths))
    # With the train stage in the command (`run`), a change that replaces the shards the model was trained on
    # trains anew on the new shards: the trainer sets the old checkpoints aside (nothing is deleted) and the line
    # below says so. Without it (`prepare`, `refresh`), the change is refused: it would leave the model on shards
    # it never saw. `--from-scratch` trains anew in any case.
    restart = "train" in stages and (from_scratch or train_on_other_shards)
    refused = "clean" if "clean" in stale else ("train" if train_on_other_shards and not restart else None)
    if refused and not overwrite:
        if refused == "clean" and inputs_changed and records["clean"].get("config") == expected["clean"]["config"]:
            raise ConfigError(
                f"{paths} holds the clean of other inputs ({inputs_changed}); pass --overwrite to clean them again "
                f"(the outputs from the clean on are replaced), or choose another name (`corpusmill refresh "
                f"--against {paths}` processes only what is new)")
        if refused == "clean":
            raise ConfigError(
                f"{paths} holds outputs of a different config (the clean stage: {_why('clean', records, expected)});"
                f" choose another name, or pass --overwrite to discard them")
        raise StageFailed(
            f"{paths} holds a model trained on shards this config would replace ({_why('train', records, expected)})"
            f"; use `corpusmill run` to rebuild the shards and train anew (the checkpoints are set aside, not "
            f"deleted), pass --overwrite to discard train/, or choose another name")
    first = refused if (refused and overwrite) else None
    for stage in stale:
        reason = _why(stage, records, expected)
        if first is not None and ALL_STAGES.index(stage) >= ALL_STAGES.index(first):
            log(f"{stage}: changed ({reason}): its outputs are discarded (--overwrite)")
            clear_outputs(STAGE_OUTPUTS[stage](paths))
        elif stage == "train" and restart and not from_scratch:
            log(f"train: trained on shards this change replaces ({reason}): training starts over at step 0 on the "
                f"new shards; the old checkpoints are set aside in train/set-aside-* (nothing is deleted)")
        elif stage == "train" and restart:
            log(f"train: changed ({reason}): --from-scratch: training starts over at step 0, the checkpoints "
                f"are set aside")
        elif stage == "train" and not cfg.train.checkpoint.enabled:
            log(f"train: its config changed ({reason}): training runs again from step 0 (checkpoints are off)")
        elif stage == "train":
            log(f"train: its config changed ({reason}): training runs again, resuming from its checkpoint")
        else:
            log(f"{stage}: changed ({reason}): it runs again" + (", and the stages after it" if stage != "report"
                                                                  else ""))
        records.pop(stage)
    if first is not None:  # every stage after the first discarded one goes too, stale or not
        for stage in ALL_STAGES[ALL_STAGES.index(first):]:
            if stage in records:
                clear_outputs(STAGE_OUTPUTS[stage](paths))
                records.pop(stage)
    if restart:  # the train stage starts over even when it was done, and the report follows it
        for stage in ("train", "report"):
            if records.pop(stage, None) is not None and stage == "train":
                log("train: --from-scratch: training runs again from step 0, the checkpoints are set aside")
    return records, restart


def input_stamps(cfg: RunConfig) -> dict[str, list[int]]:
    """Size and mtime of each local input file, by absolute path: recorded by the clean, so that a resumed `run`
    knows its inputs unchanged without hashing them again."""
    stamps = {}
    for file in expand_inputs(cfg.input.paths):
        if not is_uri(file):
            stat = os.stat(file)
            stamps[os.path.abspath(file)] = [stat.st_size, stat.st_mtime_ns]
    return stamps


def changed_inputs(cfg: RunConfig, manifest: dict) -> str | None:
    """What changed in the local input files since the clean recorded in ``manifest`` (a file's content, a file
    added or gone), named in a few words; None when nothing did. Files whose size and mtime are as recorded are
    not read; the others are hashed and compared by content (a touched file with the same bytes is unchanged).
    Inputs on a URI are not checked (a refresh addresses them by content)."""
    recorded = {i.get("sha256"): os.path.abspath(i.get("path", "")) for i in manifest.get("inputs", [])}
    seen = set(manifest.get("inputs_seen", [])) | set(recorded)
    matched = expand_inputs(cfg.input.paths)
    files = [f for f in matched if not is_uri(f)]
    if len(files) != len(matched) or input_stamps(cfg) == manifest.get("inputs_stat"):
        return None
    current = {sha256_file(f): os.path.abspath(f) for f in files}
    now = set(current.values())
    what = [f"{os.path.basename(f)} {'changed' if f in recorded.values() else 'new'}"
            for h, f in sorted(current.items(), key=lambda item: item[1]) if h not in seen]
    what += [f"{os.path.basename(f)} gone" for h, f in sorted(recorded.items(), key=lambda item: item[1])
             if h not in current and f not in now]
    if not what:
        return None
    return "its input files changed: " + ", ".join(what[:4]) + (f" and {len(what) - 4} more" if len(what) > 4 else "")


def _current(records: dict[str, dict], expected: dict[str, dict]) -> list[str]:
    return [s for s in ALL_STAGES if s in records and records[s].get("fingerprint") == expected[s]["fingerprint"]]


def _pii_engine(cfg: RunConfig) -> str | None:
    if not cfg.pii.enabled:
        return None

    return engine_description(cfg.pii)


def run_stages(cfg: RunConfig, stages: tuple[str, ...], *, against: tuple[str, ...] = (), resume: bool = False,
               overwrite: bool = False, from_scratch: bool = False, log: Callable[[str], None] = print,
               build_report: Optional[ReportBuilder] = None) -> dict:
    """Run ``stages`` in order; return the final manifest. ``resume`` skips stages done with the same
    fingerprint (``prepare`` and ``refresh`` re-run theirs). ``from_scratch``: the train stage starts at step 0,
    the run's checkpoints set aside (``corpusmill train --from-scratch``). ``build_report``: the report stage's
    builder (``report.build.build_report``), needed when ``stages`` has the report stage."""
    if "report" in stages and cfg.report.enabled and build_report is None:  # a caller's mistake, said before any work
        raise ValueError("the report stage needs its builder: run_stages(..., build_report=report.build."
                         "build_report), passed by the command that runs it")
    paths = RunPaths.of(cfg)
    preflight(cfg, stages, against)
    with run_lock(paths):
        remove_stale_temporaries(paths)
        previous = read_manifest(paths)
        inputs_changed = (changed_inputs(cfg, previous) if resume and "clean" in stages and previous
                          and "clean" in previous.get("stages_done", []) else None)
        records, train_anew = plan_changes(cfg, paths, previous, against, overwrite, log, stages=stages,
                                           from_scratch=from_scratch, inputs_changed=inputs_changed)
        manifest = {**(previous or {}), **base_manifest(cfg)}
        manifest.setdefault("timings", {})
        manifest["id_scheme"] = ID_SCHEME
        write_atomic(paths.config_yaml, cfg.resolved_yaml().encode("utf-8"))
        try:
            return _run_listed_stages(cfg, paths, stages, against, resume, records, manifest, train_anew, log,
                                      build_report)
        finally:
            release_slurm_jobs()  # the Slurm jobs of runner.slurm (if started) serve the data stages only


def _run_listed_stages(cfg: RunConfig, paths: RunPaths, stages: tuple[str, ...], against: tuple[str, ...],
                       resume: bool, records: dict, manifest: dict, train_anew: bool, log: Callable[[str], None],
                       build_report: Optional[ReportBuilder]) -> dict:
    for index, stage in enumerate(stages, 1):
        prefix = f"[{index}/{len(stages)}] {stage}"
        expected = expected_fingerprints(cfg, paths, manifest, against)
        if resume and stage in _current(records, expected):
            log(f"{prefix}: already done with this config, skipped")
            continue
        started = time.time()
        skip = _skip_reason(stage, manifest)
        if skip is not None:
            _clear_skipped(stage, paths, log)
            log(f"{prefix}: skipped: {skip}")
            result = {}
        else:
            log(f"{prefix} ...")
            if stage not in DATA_STAGES:  # the Slurm jobs of runner.slurm are not held through training
                release_slurm_jobs()
            with metered(cfg, paths, stage, log):
                result = _run_stage(cfg, paths, stage, against, log, from_scratch=train_anew,
                                    build_report=build_report)
        manifest.update(result)
        if stage == "clean":
            manifest["empty"] = manifest["counts"]["kept"] == 0
        seconds = round(time.time() - started, 2)
        manifest["timings"][f"{stage}_seconds"] = seconds
        expected = expected_fingerprints(cfg, paths, manifest, against)  # with this stage's outputs
        records[stage] = {**expected[stage], **({"skipped": skip} if skip else {})}
        manifest["skipped"] = {s: r["skipped"] for s, r in records.items() if r.get("skipped")}
        manifest["stages"] = records
        manifest["stages_done"] = _current(records, expected)
        manifest["status"] = "complete" if all(s in manifest["stages_done"] for s in DATA_STAGES) else "incomplete"
        write_json(paths.manifest, manifest)
        if skip is None:
            log(f"{prefix}: done in {seconds:.1f} s")
    return manifest


def record_training(cfg: RunConfig, code: int) -> None:
    """After `corpusmill train` in a run directory that `corpusmill run` keeps: the manifest's record of the train
    stage follows what train/ now holds, so that the next `run` neither skips a training of another config as
    "already done" nor keeps a report of the model before. Done (exit 0): the train stage is recorded with this
    command's config (a `run` with another one says what changed and trains again; with the same one it skips it)
    and the report's record goes (the next `run` rebuilds it). A training that did not finish (stopped,
    interrupted, failed) leaves neither recorded. A refusal before training (exit 2, 4, 5: nothing trained, train/
    as it was) changes nothing."""
    paths = RunPaths.of(cfg)
    if code not in (ExitCode.CONFIG, ExitCode.REFUSED) and paths.shards_manifest.is_file():
        write_data_cards(paths, lambda line: print(f"corpusmill train: {line}", flush=True))
    if code in (ExitCode.CONFIG, ExitCode.REFUSED, ExitCode.FAILED) or not paths.manifest.is_file():
        return
    with run_lock(paths):
        manifest = read_manifest(paths)
        records = (manifest or {}).get("stages")
        if not isinstance(records, dict):
            return
        expected = expected_fingerprints(cfg, paths, manifest)
        records.pop("report", None)
        if code == ExitCode.OK:
            records["train"] = expected["train"]
        else:
            records.pop("train", None)
        manifest["stages"] = records
        manifest["stages_done"] = _current(records, expected)
        write_json(paths.manifest, manifest)


def _clear_skipped(stage: str, paths: RunPaths, log: Callable[[str], None]) -> None:
    """A skipped stage leaves no outputs of an earlier run behind; a trained model is moved aside, never deleted
    (only --overwrite deletes one, in ``plan_changes``)."""
    if stage == "train" and _has_training(paths):
        # deferred: the checkpoint module imports torch, which only a run that trains needs
        from trainer_bridge.checkpoint.store import set_aside

        log(f"train: the previous checkpoints and training logs were moved to {set_aside(paths)}")
    clear_outputs(STAGE_OUTPUTS[stage](paths) if stage != "train" else (paths.train_config,))


def _stage_gpus(cfg: RunConfig, stage: str) -> int:
    """Accelerators a stage occupies (priced by ``cost.price_per_gpu_hour``): the trainer's ranks on one."""
    if stage != "train":
        return 0
    # deferred: imports torch, which only a run that trains needs
    from trainer_bridge.parallel.device import resolve_device_type

    try:
        return cfg.train.mesh.world_size if resolve_device_type(cfg.train.device) != "cpu" else 0
    except RuntimeError:  # a device that is not there: the stage itself says so
        return 0


def _tokens_trained(paths: RunPaths) -> int | None:
    records = read_jsonl(paths.metrics_jsonl)
    return records[-1].get("tokens_seen") if records else None


@contextmanager
def metered(cfg: RunConfig, paths: RunPaths, stage: str, log: Callable[[str], None]) -> Iterator[None]:
    """Measure ``stage`` (``runio.cost``) and add it to ``cost.json``, also when it fails or is interrupted
    (what it used was used); push the cost gauges when a Pushgateway is configured."""
    meter = StageMeter(cfg.cost, gpus=_stage_gpus(cfg, stage))
    try:
        with meter:
            yield
    finally:
        if meter.result is not None:
            documents = (read_json(paths.stats, {}) or {}).get("documents_read") if stage == "clean" else None
            try:
                cost = record_stage(paths.cost_json, stage, meter.result, cfg.cost,
                                    tokens_trained=_tokens_trained(paths) if stage == "train" else None,
                                    documents_cleaned=documents)
            except OSError as error:
                log(f"{stage}: cost.json not written ({error.strerror})")
            else:
                if cfg.output.pushgateway_url:
                    push_cost(cost, cfg.output.pushgateway_url, run=cfg.name)


def summary_line(manifest: dict) -> str:
    """One line for the end of a command (and a cron log): what came out, or that the result is empty."""
    c = manifest.get("counts") or {}
    skipped = f"; {c['skipped_records']} records skipped (not documents)" if c.get("skipped_records") else ""
    counts = (f"read {c.get('read', 0)} → kept {c.get('kept', 0)} (removed {c.get('removed', 0)}, quarantined "
              f"{c.get('quarantined', 0)}{skipped})")
    if manifest.get("empty"):
        skipped = sorted(manifest.get("skipped", {}), key=ALL_STAGES.index)
        return (f"empty result: {EMPTY_REASON}: {counts}; {' and '.join(skipped) or 'nothing'} skipped; "
                f"manifest.json says \"empty\": true")
    parts = [counts]
    totals = (manifest.get("shards") or {}).get("totals") or {}
    if totals:
        parts.append("shards " + ", ".join(f"{s} {t.get('docs', 0)} docs/{t.get('tokens', 0)} tokens"
                                           for s, t in sorted(totals.items())))
    if "train" in manifest.get("skipped", {}):
        parts.append(f"training skipped: {manifest['skipped']['train']}")
    elif "train" in manifest.get("stages_done", []):
        parts.append("trained")
    if manifest.get("report"):
        parts.append(f"report {manifest['report']}")
    return "; ".join(parts)

