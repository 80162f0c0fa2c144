"""Running stages into a run directory: one lock, one config, resumable at stage granularity.

`prepare` = clean → shards; `refresh` = the same against earlier runs; `run` = clean → shards → train → report.
`manifest.json` is rewritten after every stage (atomically) with the stages done so far; its status becomes
`complete` once the data is prepared. A re-run of `run` skips the stages already done with the same config; a
run directory holding another config's outputs is refused.
"""
from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from pipelines.config import ConfigError, RunConfig
from pipelines.prepare import base_manifest, previously_processed, run_clean, run_shards, summary_table
from pipelines.rundir import clear_outputs, read_manifest
from runio.files import write_atomic, write_json
from runio.layout import RunPaths

DATA_STAGES = ("clean", "shards")
ALL_STAGES = ("clean", "shards", "train", "report")


class StageFailed(RuntimeError):
    """A stage ended without its result; the message is the one-line reason for cron/systemd logs."""


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


def _check_config(cfg: RunConfig, paths: RunPaths, manifest: dict | None, overwrite: bool) -> None:
    if manifest is None or manifest.get("config_fingerprint") == cfg.fingerprint():
        return
    if not overwrite:
        raise ConfigError(f"{paths} holds outputs of a different config (fingerprint "
                          f"{manifest.get('config_fingerprint')} vs {cfg.fingerprint()}); choose another name, or "
                          f"pass --overwrite to discard them")


def _clear_for_new_config(paths: RunPaths) -> None:
    clear_outputs(paths.all_outputs)


def _pii_engine(cfg: RunConfig) -> str | None:
    if not cfg.pii.enabled:
        return None
    from transforms.pii import engine_description

    return engine_description(cfg.pii)


def run_stages(cfg: RunConfig, stages: tuple[str, ...], *, against: tuple[str, ...] = (), resume: bool = False,
               overwrite: bool = False, log: Callable[[str], None] = print) -> dict:
    """Run ``stages`` in order; return the final manifest. ``resume`` skips stages already done."""
    paths = RunPaths.of(cfg)
    with run_lock(paths):
        manifest = read_manifest(paths)
        _check_config(cfg, paths, manifest, overwrite)
        if manifest is not None and manifest.get("config_fingerprint") != cfg.fingerprint():
            _clear_for_new_config(paths)
            manifest = None
        if against:
            previously_processed(against)  # fail early on a bad --against, before touching anything
        done: list[str] = list(manifest.get("stages_done", [])) if (manifest and resume) else []
        manifest = {**(manifest if resume and manifest else {}), **base_manifest(cfg)}
        manifest.setdefault("timings", {})
        write_atomic(paths.config_yaml, cfg.resolved_yaml().encode("utf-8"))
        for index, stage in enumerate(stages, 1):
            prefix = f"[{index}/{len(stages)}] {stage}"
            if stage in done:
                log(f"{prefix}: already done with this config, skipped")
                continue
            log(f"{prefix} ...")
            started = time.time()
            manifest.update(_run_stage(cfg, paths, stage, against, log))
            seconds = round(time.time() - started, 2)
            manifest["timings"][f"{stage}_seconds"] = seconds
            done = [s for s in done if s != stage] + [stage]
            manifest["stages_done"] = done
            manifest["status"] = "complete" if all(s in done for s in DATA_STAGES) else "incomplete"
            write_json(paths.manifest, manifest)
            log(f"{prefix}: done in {seconds:.1f} s")
        return manifest


def _run_stage(cfg: RunConfig, paths: RunPaths, stage: str, against: tuple[str, ...],
               log: Callable[[str], None]) -> dict:
    if stage == "clean":
        stats = run_clean(cfg, against, log)
        log(summary_table(stats))
        if cfg.output.pushgateway_url:
            from runio.pushgateway import push_pipeline_stats

            push_pipeline_stats(stats, cfg.output.pushgateway_url, run=cfg.name, stage="clean")
        return {"inputs": stats.pop("inputs"), "inputs_seen": stats.pop("inputs_seen"), "against": list(against),
                "steps": [row["step"] for row in stats["steps"]], "counts": stats["accounting"],
                "pii_engine": _pii_engine(cfg)}
    if stage == "shards":
        shards = run_shards(cfg, log)
        totals = shards.get("totals", {})
        for split, t in sorted(totals.items()):
            log(f"shards/{split}: {t.get('docs')} documents → {t.get('tokens')} tokens in {t.get('rows')} rows of "
                f"{shards.get('seq_len')}, fill {t.get('fill_ratio', 0):.2%}, documents split {t.get('docs_split')}")
        return {"shards": {"tokenizer_sha256": shards.get("tokenizer_sha256"), "totals": totals,
                           "seq_len": shards.get("seq_len"), "packing": shards.get("packing")}}
    if stage == "train":
        from trainer_bridge.launch import run_training

        code = run_training(cfg)
        if code != 0:
            raise StageFailed(f"training failed with exit code {code}; re-run to resume from the last checkpoint")
        return {}
    if stage == "report":
        from report.build import build_report

        if not cfg.report.enabled:
            log("report: disabled (report.enabled: false)")
            return {}
        path = build_report(paths, cfg.report)
        log(f"report: {path}")
        return {"report": str(path)}
    raise ValueError(f"unknown stage {stage!r}")
