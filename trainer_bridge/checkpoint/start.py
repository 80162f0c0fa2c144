"""How a training run starts: fresh, resuming this run's checkpoint, or initialised from other weights. One
decision (``plan_start``), made once per start: by the launcher before any rank runs (``launch.preflight``), or,
without a launcher (``loop.train.train`` called directly, a rank restarted by torchrun), by rank 0, which hands it
to the other ranks (``agreed_plan``). The ranks' ``CheckpointManager`` loads the checkpoint the plan names.

Every refusal is said here, before anything is loaded: checkpoints where none is sound, or of another model or
other shards, or past ``train.steps`` (``store.plan_resume``); ``checkpoint.resume: false`` or
``checkpoint.enabled: false`` beside checkpoints (``store.refuse_training_anew_beside``,
``store.start_without_checkpoints``); a ``train.init_from`` that does not exist or holds another model.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Literal

import torch.distributed as dist

from runio.layout import RunPaths
from trainer_bridge import hf
from trainer_bridge.checkpoint.store import (
    RunIdentity,
    checkpoint_candidates,
    checkpoint_problem,
    plan_resume,
    refuse_training_anew_beside,
    resume_problem,
    set_aside,
    start_without_checkpoints,
)
from trainer_bridge.checkpoint.tiers import durable_tiers, restore_from_durable
from trainer_bridge.config import TrainConfig
from trainer_bridge.outcomes import TrainConfigError, TrainRefused

FRESH, RESUME, INIT = "fresh", "resume", "init"
# Set by torchrun in a worker it restarted (``--max-restarts``, an elastic membership change): the launcher's
# plan was made before checkpoints the failed attempt saved, so the restarted ranks plan again.
RESTART_COUNT_ENV = "TORCHELASTIC_RESTART_COUNT"


@dataclass(frozen=True)
class StartPlan:
    """``kind``: fresh (step 0, seeded weights), resume (``path``: this run's checkpoint: weights, optimizer,
    step and data position) or init (``path``: another run's checkpoint, whose weights, optimizer and step
    continue on this run's data from sample 0; with ``weights_only``, ``path`` is the ``train.init_from``
    spec, ``hf:PATH`` or an import, whose weights alone are loaded: fresh optimizer, step 0). ``identity``: the
    model, shards and ``train.steps`` the plan was checked against (``RunIdentity``)."""

    kind: Literal["fresh", "resume", "init"]
    path: str | None = None
    weights_only: bool = False
    identity: dict | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "StartPlan":
        return cls(**json.loads(text))


def restarted_by_torchrun() -> bool:
    return int(os.environ.get(RESTART_COUNT_ENV, "0") or 0) > 0


def checked_init_from(train_cfg: TrainConfig, identity: RunIdentity,
                      say: Callable[[str], None] | None = None) -> StartPlan:
    """The plan of a start from ``train.init_from`` (fresh without one): it exists and, for a run directory,
    has a sound checkpoint of the same model (each damaged newer one said through ``say``)."""
    spec = train_cfg.init_from
    checked = _identity(identity)
    if not spec:
        return StartPlan(FRESH, identity=checked)
    if not Path(spec.removeprefix(hf.HF_PREFIX)).exists():
        raise TrainConfigError(f"train.init_from: {spec.removeprefix(hf.HF_PREFIX)} does not exist")
    if spec.startswith(hf.HF_PREFIX):
        return StartPlan(INIT, spec, weights_only=True, identity=checked)
    source_run = RunPaths(spec)
    sound = None
    for path in checkpoint_candidates(source_run.checkpoints):
        problem = checkpoint_problem(path)
        if problem is None:
            sound = path
            break
        if say is not None:
            say(f"init_from: checkpoint {path.name} is damaged ({problem}); trying an older one")
    if sound is None:
        raise TrainRefused(f"train.init_from: no usable checkpoint under {source_run.checkpoints}")
    mismatch = resume_problem(sound, identity, compare_shards=False)
    if mismatch is not None:
        raise TrainRefused(f"train.init_from: {source_run.root} {sound.name} has another model ({mismatch}); "
                           "set train.model to that run's model")
    if hf.is_weights_only_init(spec):  # an import-hf folder: a model-only checkpoint, weights alone
        return StartPlan(INIT, spec, weights_only=True, identity=checked)
    return StartPlan(INIT, str(sound), identity=checked)


def plan_start(train_cfg: TrainConfig, paths: RunPaths, identity: RunIdentity, *, from_scratch: bool = False,
               by_ranks: bool = False, say: Callable[[str], None]) -> StartPlan:
    """The one start decision (see the module docstring). ``from_scratch``: the run's checkpoints and training
    logs, and the durable tiers' checkpoints, are set aside first (after ``train.init_from`` is checked: a
    refused start leaves the run as it was). ``by_ranks``: made by the ranks themselves (no launcher before them,
    or ranks restarted by torchrun), whose training logs are already open: an earlier attempt's logs are set
    aside by the launcher alone."""
    checkpoint = train_cfg.checkpoint
    if from_scratch:
        plan = checked_init_from(train_cfg, identity, say)  # before anything is moved
        aside = set_aside(paths)
        if aside is not None:
            say(f"--from-scratch: the previous checkpoints and training logs were moved to {aside}")
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        for tier in durable_tiers(checkpoint, paths):
            moved = tier.set_aside(stamp)
            if moved is not None:
                say(f"--from-scratch: the durable tier's checkpoints were moved to {moved}")
        return plan
    if not checkpoint.enabled:
        if not by_ranks:
            start_without_checkpoints(paths, say)
        return checked_init_from(train_cfg, identity, say)
    if not checkpoint.resume:
        refuse_training_anew_beside(paths.checkpoints, durable_tiers(checkpoint, paths))
        return checked_init_from(train_cfg, identity, say)
    restore_from_durable(checkpoint, paths, say)  # the fast tier lost or behind: before it is planned
    path = plan_resume(paths.checkpoints, identity, say=say, takedown_ledger=paths.takedown_ledger)
    if path is not None:
        return StartPlan(RESUME, str(path), identity=_identity(identity))
    return checked_init_from(train_cfg, identity, say)


def agreed_plan(make: Callable[[], StartPlan], *, distributed: bool, is_main: bool, device=None) -> StartPlan:
    """``make()`` on rank 0 alone (it may move files: a durable tier's copy, a set-aside), its plan handed to
    every rank; an error it raises is raised on every rank alike (none is left waiting for a plan)."""
    if not distributed:
        return make()
    payload: list = [None]
    if is_main:
        try:
            payload[0] = make()
        except Exception as error:  # noqa: BLE001 - handed to every rank and raised there, rank 0 included
            payload[0] = error
    dist.broadcast_object_list(payload, src=0, device=device)
    if isinstance(payload[0], BaseException):
        raise payload[0]
    return payload[0]


def _identity(identity: RunIdentity) -> dict:
    return {"model": identity.model, "shards": identity.shards, "train_steps": identity.train_steps}
