"""The training loop's checkpoint component: saves on its cadence (``checkpoint.interval``, the last step, before
a pause or stop), loads the checkpoint the start plan names (``start.StartPlan``), names the rollback target, and
hands finished checkpoints to the durable tiers (``tiers.TierUploader``). The checkpoints themselves (layout,
soundness, DCP saving and loading) are ``store``'s."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Protocol

import torch
import torch.distributed as dist

from runio.layout import RunPaths
from trainer_bridge.checkpoint.store import (
    PROVENANCE_FILE,
    Checkpointer,
    RunIdentity,
    interrupts_deferred,
    latest_checkpoint,
    load_checkpoint,
    read_checkpoint_json,
    step_dir_name,
)
from trainer_bridge.checkpoint.tiers import TierUploader, durable_tiers
from trainer_bridge.config import CheckpointConfig
from trainer_bridge.parallel import device as devices


class TrainState(Protocol):
    """What the loop keeps besides model and optimizer: saved as the checkpoint's ``train.*`` tensors."""

    @property
    def healthy(self) -> bool: ...  # False during a streak of bad steps

    def tensors(self) -> dict[str, torch.Tensor]: ...

    def load(self, tensors: dict[str, torch.Tensor], keep_data_position: bool = False) -> None: ...


class CheckpointManager:
    """The training loop's checkpoint component: saves every ``checkpoint.interval`` steps and at the last one
    (never during a streak of bad steps: a rollback must land on a healthy state), loads the checkpoint it is
    given (the start plan's, ``start.StartPlan``; a rollback's), and names the rollback target.

    With ``checkpoint.enabled: false`` nothing is saved and there is nothing to roll back to. All ranks call
    every method."""

    def __init__(self, paths: RunPaths, cfg: CheckpointConfig, runtime: devices.Runtime, *, parts, optimizers,
                 state: TrainState, monitor, events: list[dict], say: Callable[[str], None],
                 identity: RunIdentity | None = None):
        self.root = paths.checkpoints
        self.cfg = cfg
        self.runtime = runtime
        self.parts, self.optimizers, self.state = parts, optimizers, state
        self.monitor = monitor
        self.events = events
        self.say = say
        self.identity = identity
        self.paths = paths
        self.uploader = None
        self._loop_seconds_carried = 0.0  # promotions at steps without a save, for the next event's loop_s
        self._upload_anyway: set[int] = set()  # steps saved before a pause or stop: copied whatever tier.every says
        if cfg.enabled and cfg.durable_tiers and runtime.is_main:
            self.uploader = TierUploader(durable_tiers(cfg, paths), say)
        self.checkpointer = (Checkpointer(self.root, cfg, runtime, describe=identity.files if identity else None,
                                          on_promoted=self._promoted if self.uploader is not None else None)
                             if cfg.enabled else None)

    def _pause_uploads(self) -> None:
        if self.uploader is not None:
            self.uploader.pause()

    def _resume_uploads(self) -> None:
        """The durable copies go on once no save to the fast tier is in flight."""
        if self.uploader is not None and not self.checkpointer.in_flight:
            self.uploader.resume()

    def _promoted(self, path: Path, step: int) -> None:
        final = step in self._upload_anyway or (self.identity is not None and step >= self.identity.train_steps)
        self._upload_anyway.discard(step)
        self.uploader.submit(path, step, final)

    # -- saving -------------------------------------------------------------------------------------------
    def maybe_save(self, step: int, *, last: bool) -> None:
        """After step ``step`` (the number of completed steps): promote a finished async save; save when due."""
        if self.checkpointer is None:
            return
        started, promotions = time.perf_counter(), self.checkpointer.promotions
        self._pause_uploads()  # a promotion (hashing the new checkpoint) and a save never run beside a copy
        self.checkpointer.poll()
        if (step % self.cfg.interval == 0 or last) and self.state.healthy:
            if last:
                self._upload_anyway.add(step)
            self.save(step, loop_started=started)
        elif self.checkpointer.promotions != promotions:  # an async save promoted: loop time of the next event
            self._loop_seconds_carried += time.perf_counter() - started
        self._resume_uploads()
        if self.uploader is not None:
            self.monitor.observe_durable_tier(self.uploader.lag_seconds(), self.uploader.failures)

    def note_val_loss(self, step: int, loss: float) -> None:
        """The validation loss after ``step`` steps: recorded in that step's checkpoint (when one is saved) and
        compared for ``checkpoints/best``."""
        if self.checkpointer is not None:
            self.checkpointer.val_losses[step] = loss

    def save(self, step: int, loop_started: float | None = None) -> None:
        """The event's ``blocking_s`` is the save call's own blocking part; ``loop_s`` all the loop's wall time for
        checkpoints since the previous event: this call from ``loop_started`` (the previous async save's promotion
        and the wait for it included) and a promotion of the previous save at a step without a save."""
        started = time.perf_counter()
        self._pause_uploads()  # until the save is complete (an async one: see _resume_uploads)
        self.checkpointer.save(step, self.parts, self.optimizers, self.state.tensors())
        self._resume_uploads()
        blocking = self.checkpointer.last_blocking_seconds
        now = time.perf_counter()
        self.monitor.observe_checkpoint(now - started, blocking)
        loop = now - (started if loop_started is None else loop_started) + self._loop_seconds_carried
        self._loop_seconds_carried = 0.0
        self.events.append({"step": step, "event": "checkpoint", "blocking_s": blocking, "loop_s": round(loop, 6)})

    def save_now(self, step: int) -> None:
        """Before pausing or stopping for an alert: a checkpoint of this step, unless one was just taken."""
        if self.checkpointer is None:
            return
        latest = latest_checkpoint(self.root)
        self._pause_uploads()
        if latest is None or latest.name != step_dir_name(step):
            self._upload_anyway.add(step)
            self.save(step)
        self.checkpointer.wait()
        self._resume_uploads()

    # -- loading ------------------------------------------------------------------------------------------
    def load(self, path: Path, keep_data_position: bool = False) -> None:
        tensors = self.state.tensors()
        with interrupts_deferred():  # DCP would wrap a KeyboardInterrupt in a CheckpointException
            had_rng = load_checkpoint(path, self.runtime, self.parts, self.optimizers, tensors)
        self.state.load(tensors, keep_data_position)
        if not had_rng:
            self.say(f"{path.name} has no RNG state for rank {self.runtime.rank} (world size changed); "
                     "this rank keeps its seeded RNG")

    def provenance(self, path: Path) -> dict | None:
        return read_checkpoint_json(path, PROVENANCE_FILE)

    def rollback_target(self) -> Path | None:
        """The newest complete checkpoint to roll back to (an async save in flight may be it); None without."""
        if self.checkpointer is None:
            return None
        self._pause_uploads()
        self.checkpointer.wait()
        self._resume_uploads()
        if self.runtime.distributed:
            dist.barrier()  # rank 0 has promoted it before anyone reads 'latest'
        return latest_checkpoint(self.root)

    def close(self) -> None:
        """Finish a save in flight, then wait for the durable tiers to receive what was handed over (the end of
        the run, not the loop, waits on them)."""
        if self.checkpointer is not None:
            self.checkpointer.close()
        if self.uploader is not None:
            self.uploader.resume()
            self.uploader.close()
            self.monitor.observe_durable_tier(self.uploader.lag_seconds(), self.uploader.failures)
