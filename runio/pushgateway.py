"""The pipelines' counters pushed to a Prometheus Pushgateway at the end of a stage.

On the ground floor so that the cleaning side (``pipelines/``) and the training side (``trainer_bridge/``) may
both import it without importing each other. The trainer's own live series are served by
``trainer_bridge.observe.monitoring``; metric names are listed in ``configs/monitoring/`` (the Grafana dashboard and the
alert rules read them). Imports ``prometheus_client`` only when called.
"""
from __future__ import annotations

import logging
import time

log = logging.getLogger("corpusmill.pushgateway")

PREFIX = "corpusmill"  # every exported series starts with it
JOB = "corpusmill_pipeline"


def pipeline_registry(stats: dict, stage: str = "prepare"):
    """The counters of a pipeline ``stats.json`` as a fresh registry of gauges (a push replaces the group)."""
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()
    # run and stage travel in the push's grouping key, which the Pushgateway adds as labels to every series.

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ()):
        return Gauge(f"{PREFIX}_pipeline_{name}", doc, list(labels), registry=registry)

    gauge("documents_read", "documents read (kept + removed + quarantined)").set(stats.get("documents_read", 0))
    gauge("documents_kept", "documents kept after the last step").set(stats.get("kept", 0))
    gauge("text_bytes_read", "bytes of text read").set(stats.get("text_bytes_read", 0))
    quarantined = gauge("documents_quarantined", "input records quarantined, by kind", ("kind",))
    for kind, count in ((stats.get("quarantined") or {}).get("by_kind") or {}).items():
        quarantined.labels(kind=kind).set(count)
    step_in = gauge("step_documents_in", "documents entering a step", ("step",))
    removed = gauge("documents_removed", "documents removed, by step and reason", ("step", "reason"))
    busy = gauge("step_busy_seconds", "worker busy time of a step", ("step",))
    for row in stats.get("steps", []):
        step_in.labels(step=row["step"]).set(row.get("in", 0))
        busy.labels(step=row["step"]).set(row.get("busy_seconds", 0.0))
        for reason, count in (row.get("removed_by_reason") or {}).items():
            removed.labels(step=row["step"], reason=reason).set(count)
    balanced = (stats.get("accounting") or {}).get("balanced")
    if balanced is not None:
        gauge("accounting_balanced", "1 when read = kept + removed + quarantined").set(int(balanced))
    seconds = stats.get(f"{stage}_seconds", stats.get("cleaning_seconds"))
    if isinstance(seconds, (int, float)):
        gauge("stage_seconds", "wall time of the stage").set(seconds)
    gauge("last_push_timestamp_seconds", "unix time of this push").set(time.time())
    return registry


def push_pipeline_stats(stats: dict, url: str | None, *, run: str = "", stage: str = "prepare", job: str = JOB,
                        timeout_s: float = 5.0) -> bool:
    """Push a stage's counters to the Pushgateway at ``url`` (``output.pushgateway_url``). Returns False (with a
    warning) when the push fails or no gateway is given: ``stats.json`` stays the record, a dead gateway never
    fails a run."""
    if not url:
        return False
    from prometheus_client import push_to_gateway

    try:
        push_to_gateway(url, job=job, registry=pipeline_registry(stats, stage),
                        grouping_key={"run": run or "unnamed", "stage": stage}, timeout=timeout_s)
    except Exception as error:
        log.warning("Pushgateway %s: push of %s/%s failed (%s); the counters are in stats.json", url, run, stage, error)
        return False
    return True


def cost_registry(cost: dict):
    """``cost.json`` as gauges: per stage wall and CPU seconds, kWh (labelled with the energy's source), money
    and CO₂ where prices are configured."""
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ("stage",)):
        return Gauge(f"{PREFIX}_cost_{name}", doc, list(labels), registry=registry)

    wall, cpu = gauge("wall_seconds", "wall time of a stage"), gauge("cpu_seconds", "CPU seconds of a stage")
    kwh = gauge("energy_kwh", "energy of a stage (source: nvml, rapl or estimate)", ("stage", "source"))
    money = gauge("money", "money spent by a stage, in cost.currency", ("stage", "currency"))
    co2 = gauge("co2_grams", "CO2 emitted by a stage's energy")
    for stage, entry in (cost.get("stages") or {}).items():
        wall.labels(stage=stage).set(entry["wall_s"])
        cpu.labels(stage=stage).set(entry["cpu_s"])
        kwh.labels(stage=stage, source=entry["energy_source"]).set(entry["kwh"])
        if entry.get("money"):
            money.labels(stage=stage, currency=cost.get("currency", "")).set(entry["money"]["total"])
        if entry.get("co2_g") is not None:
            co2.labels(stage=stage).set(entry["co2_g"])
    return registry


def push_cost(cost: dict, url: str | None, *, run: str = "", job: str = JOB, timeout_s: float = 5.0) -> bool:
    """Push ``cost.json``'s gauges (grouping key: run, stage "cost"); False with a warning when it fails."""
    if not url:
        return False
    from prometheus_client import push_to_gateway

    try:
        push_to_gateway(url, job=job, registry=cost_registry(cost), grouping_key={"run": run or "unnamed",
                                                                                  "stage": "cost"},
                        timeout=timeout_s)
    except Exception as error:
        log.warning("Pushgateway %s: push of %s cost failed (%s); the numbers are in cost.json", url, run, error)
        return False
    return True
