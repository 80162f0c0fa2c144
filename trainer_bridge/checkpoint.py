"""Checkpoints with torch.distributed.checkpoint (DCP): exact resume, any world size, atomic, kept-last-N.

Layout under ``RunPaths.checkpoints`` (``<run>/train/checkpoints/``):
    step-00000100/          a complete DCP checkpoint (each rank wrote its shards; rank 0 the metadata)
    step-00000200.partial/  a save in progress or interrupted: never loaded, removed at the next start
    latest                  text file naming the newest complete checkpoint, replaced atomically

A save is written into ``.partial`` and renamed only once DCP has written its metadata (which DCP does after
every rank reported its writes), then ``latest`` is replaced by ``os.replace``: an interrupted save can never
become "latest".

What is saved (tensors only, so that loading unpickles nothing but DCP's own metadata, and that through an
allow-list): model parameters and AdamW state by fully-qualified name (DCP reshards them to the loading
topology), the train state (step, global sample index = data state, tokens seen, counters, loss scale, guard
statistics; the LR schedule is a pure function of the step) and every rank's RNG states.

``CheckpointManager`` is the training loop's checkpoint component (cadence, resume, rollback target,
``train.init_from``); ``Checkpointer`` does the DCP saving and loading underneath it.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import time
import warnings
from pathlib import Path
from typing import Callable, Protocol

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from runio.files import sha256_file, write_atomic, write_json
from runio.layout import RunPaths
from trainer_bridge import device as devices
from trainer_bridge.config import CheckpointConfig

LATEST = "latest"
PARTIAL_SUFFIX = ".partial"


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


class _MetadataUnpickler(pickle.Unpickler):
    """DCP pickles its metadata; allow only DCP's own dataclasses, torch sizes/dtypes and plain containers."""

    def find_class(self, module: str, name: str):
        allowed = (
            module.startswith("torch.distributed.checkpoint.")
            or (module == "torch" and (name == "Size" or isinstance(getattr(torch, name, None), torch.dtype)))
            or (module == "torch.serialization" and name == "_get_layout")  # str -> torch.layout, as weights_only
            or (module == "collections" and name == "OrderedDict")
            or (module == "pathlib" and name in {"Path", "PosixPath", "WindowsPath", "PurePosixPath"})
            or (module == "builtins" and name in {"set", "frozenset", "slice"})
        )
        if not allowed:
            raise pickle.UnpicklingError(f"checkpoint metadata refers to {module}.{name}: not allowed "
                                         "(checkpoints must hold tensors only)")
        return super().find_class(module, name)


class SafeFileSystemReader(dcp.FileSystemReader):
    """FileSystemReader whose metadata load goes through an allow-list (tensors already load weights_only)."""

    def read_metadata(self, *args, **kwargs):
        rank = kwargs.get("rank")
        path = self._get_metadata_path(rank)
        with self.fs.create_stream(path, "rb") as stream:
            metadata = _MetadataUnpickler(stream).load()
        if getattr(metadata, "storage_meta", None) is None:
            from torch.distributed.checkpoint.metadata import StorageMeta

            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def latest_checkpoint(root: Path) -> Path | None:
    pointer = root / LATEST
    if not pointer.exists():
        return None
    path = root / pointer.read_text().strip()
    return path if (path / ".metadata").exists() else None


CHECKSUMS = "checksums.json"


def write_checksums(path: Path) -> None:
    """Record size and sha256 of every file of a complete save, so that a damaged checkpoint is detected
    before it is loaded (DCP itself would load flipped bytes silently)."""
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
             for p in sorted(path.iterdir()) if p.is_file() and p.name != CHECKSUMS}
    write_json(path / CHECKSUMS, files, indent=1, sort_keys=True)


def checkpoint_problem(path: Path) -> str | None:
    """Why ``path`` cannot be trusted (missing metadata, a missing, truncated or altered file), or None."""
    if not (path / ".metadata").exists():
        return "no .metadata file"
    listing = path / CHECKSUMS
    if not listing.exists():
        return None  # written by an older version: nothing to compare against
    try:
        expected = json.loads(listing.read_text())
    except (OSError, json.JSONDecodeError) as error:
        return f"{CHECKSUMS} unreadable ({error})"
    for name, want in sorted(expected.items()):
        file = path / name
        if not file.exists():
            return f"{name} is missing"
        if file.stat().st_size != want["bytes"]:
            return f"{name} has {file.stat().st_size} bytes, {want['bytes']} were written"
        if sha256_file(file) != want["sha256"]:
            return f"{name} does not match its checksum"
    return None


def checkpoint_candidates(root: Path) -> list[Path]:
    """Complete checkpoints, newest first, starting from the one ``latest`` names."""
    complete = sorted((p for p in Path(root).glob("step-*") if p.is_dir() and not p.name.endswith(PARTIAL_SUFFIX)),
                      reverse=True)
    newest = latest_checkpoint(Path(root))
    if newest is not None:
        complete = [p for p in complete if p.name <= newest.name]
    return complete


def saved_keys(path: Path) -> set[str]:
    return set(SafeFileSystemReader(path).read_metadata().state_dict_metadata.keys())


def _full_state(runtime: devices.Runtime, parts, optimizers, train_state: dict[str, torch.Tensor],
                include_rng: bool = True) -> dict:
    model_sd, optim_sd = {}, {}
    for part, optimizer in zip(parts, optimizers):
        model_sd.update(get_model_state_dict(part))
        optim_sd.update(get_optimizer_state_dict(part, optimizer)["state"])
    state = {"model": model_sd, "optim": optim_sd, "train": dict(train_state)}
    if include_rng:
        state["rng"] = {f"rank{runtime.rank}": devices.rng_states(runtime.device)}
    return state


def load_checkpoint(path: Path, runtime: devices.Runtime, parts, optimizers,
                    train_state: dict[str, torch.Tensor]) -> bool:
    """Load ``path`` into the model parts, optimizers and ``train_state`` (in place); every rank calls it.

    Returns whether this rank's RNG states were restored (only when the checkpoint has this rank's)."""
    keys = saved_keys(path)
    has_rng = any(k.startswith(f"rng.rank{runtime.rank}.") for k in keys)
    state = _full_state(runtime, parts, optimizers, train_state, include_rng=has_rng)
    template_groups = [get_optimizer_state_dict(p, o)["param_groups"] for p, o in zip(parts, optimizers)]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(path), storage_reader=SafeFileSystemReader(path),
                 no_dist=not runtime.distributed)
    for part, optimizer, groups in zip(parts, optimizers, template_groups):
        names = set(get_model_state_dict(part).keys())
        set_model_state_dict(part, {k: v for k, v in state["model"].items() if k in names},
                             options=StateDictOptions(strict=True))
        set_optimizer_state_dict(part, optimizer, {
            "state": {k: v for k, v in state["optim"].items() if k in names}, "param_groups": groups})
    train_state.update(state["train"])
    if has_rng:
        devices.set_rng_states(runtime.device, state["rng"][f"rank{runtime.rank}"])
    return has_rng


class Checkpointer:
    """Saves and loads the training state through DCP; one instance per process, all ranks call every method."""

    def __init__(self, root: Path, cfg: CheckpointConfig, runtime: devices.Runtime):
        self.root = Path(root)
        self.cfg = cfg
        self.runtime = runtime
        # Async saves run collectives in a background thread: on the training group they would interleave
        # with training collectives and gloo aborts (ENVIRONMENT.md). They get a group of their own.
        self.async_group = (dist.new_group(backend=devices.side_channel_backend())
                            if cfg.async_save and runtime.distributed else None)
        self._pending = None  # (future, partial_path, step)
        self.last_blocking_seconds = 0.0
        if runtime.is_main:
            self.root.mkdir(parents=True, exist_ok=True)
            for stale in self.root.glob("*" + PARTIAL_SUFFIX):
                shutil.rmtree(stale, ignore_errors=True)
        if runtime.distributed:
            dist.barrier()

    # -- save ---------------------------------------------------------------------------------------------
    def save(self, step: int, parts, optimizers, train_state: dict[str, torch.Tensor]) -> None:
        self.wait()
        start = time.perf_counter()
        final = self.root / step_dir_name(step)
        partial = self.root / (step_dir_name(step) + PARTIAL_SUFFIX)
        state = _full_state(self.runtime, parts, optimizers, train_state)
        if self.cfg.async_save:
            # async_save copies (stages) the state to CPU memory before returning; training may then change
            # the parameters while the background thread writes the copy.
            future = dcp.async_save(state, checkpoint_id=str(partial), process_group=self.async_group,
                                    no_dist=not self.runtime.distributed)
            self._pending = (future, partial, step)
        else:
            with warnings.catch_warnings():  # DCP warns that a single process saves alone: intended here
                warnings.filterwarnings("ignore", message="torch.distributed is disabled")
                dcp.save(state, checkpoint_id=str(partial), no_dist=not self.runtime.distributed)
            self._promote(partial, final)
        self.last_blocking_seconds = time.perf_counter() - start

    def poll(self) -> None:
        """Promote a finished async save; never blocks."""
        if self._pending is not None and self._pending[0].done():
            self.wait()

    def wait(self) -> None:
        if self._pending is None:
            return
        future, partial, step = self._pending
        self._pending = None
        future.result()
        self._promote(partial, self.root / step_dir_name(step))

    def _promote(self, partial: Path, final: Path) -> None:
        # DCP's finish step (rank 0 writes .metadata after gathering every rank's write results) has run once
        # the save returned on rank 0: the checkpoint is complete.
        if not self.runtime.is_main:
            return
        write_checksums(partial)
        if final.exists():
            shutil.rmtree(final)
        os.replace(partial, final)
        write_atomic(self.root / LATEST, (final.name + "\n").encode())
        complete = sorted(p for p in self.root.glob("step-*") if p.is_dir() and not p.name.endswith(PARTIAL_SUFFIX))
        for old in complete[: -self.cfg.keep_last]:
            shutil.rmtree(old, ignore_errors=True)

    def load(self, path: Path, parts, optimizers, train_state: dict[str, torch.Tensor]) -> bool:
        return load_checkpoint(path, self.runtime, parts, optimizers, train_state)

    def close(self) -> None:
        self.wait()
        if self.async_group is not None:
            dist.destroy_process_group(self.async_group)
            self.async_group = None


# ------------------------------------------------------------------------------------ the loop's component

class TrainState(Protocol):
    """What the loop keeps besides model and optimizer: saved as the checkpoint's ``train.*`` tensors."""

    @property
    def healthy(self) -> bool: ...  # False during a streak of bad steps

    def tensors(self) -> dict[str, torch.Tensor]: ...

    def load(self, tensors: dict[str, torch.Tensor], keep_data_position: bool = False) -> None: ...


class CheckpointManager:
    """The training loop's checkpoint component: saves every ``checkpoint.interval`` steps and at the last one
    (never during a streak of bad steps: a rollback must land on a healthy state), resumes from the newest sound
    checkpoint, names the rollback target, and initializes from another run (``train.init_from``).

    With ``checkpoint.enabled: false`` nothing is saved, there is nothing to resume or roll back to, and only
    ``initialize_from`` loads. All ranks call every method."""

    def __init__(self, paths: RunPaths, cfg: CheckpointConfig, runtime: devices.Runtime, *, parts, optimizers,
                 state: TrainState, monitor, events: list[dict], say: Callable[[str], None]):
        self.root = paths.checkpoints
        self.cfg = cfg
        self.runtime = runtime
        self.parts, self.optimizers, self.state = parts, optimizers, state
        self.monitor = monitor
        self.events = events
        self.say = say
        self.checkpointer = Checkpointer(self.root, cfg, runtime) if cfg.enabled else None

    # -- saving -------------------------------------------------------------------------------------------
    def maybe_save(self, step: int, *, last: bool) -> None:
        """After step ``step`` (the number of completed steps): promote a finished async save; save when due."""
        if self.checkpointer is None:
            return
        self.checkpointer.poll()
        if (step % self.cfg.interval == 0 or last) and self.state.healthy:
            self.save(step)

    def save(self, step: int) -> None:
        started = time.perf_counter()
        self.checkpointer.save(step, self.parts, self.optimizers, self.state.tensors())
        blocking = self.checkpointer.last_blocking_seconds
        self.monitor.observe_checkpoint(time.perf_counter() - started, blocking)
        self.events.append({"step": step, "event": "checkpoint", "blocking_s": blocking})

    def save_now(self, step: int) -> None:
        """Before pausing or stopping for an alert: a checkpoint of this step, unless one was just taken."""
        if self.checkpointer is None:
            return
        latest = latest_checkpoint(self.root)
        if latest is None or latest.name != step_dir_name(step):
            self.save(step)
        self.checkpointer.wait()

    # -- loading ------------------------------------------------------------------------------------------
    def load(self, path: Path, keep_data_position: bool = False) -> None:
        tensors = self.state.tensors()
        had_rng = load_checkpoint(path, self.runtime, self.parts, self.optimizers, tensors)
        self.state.load(tensors, keep_data_position)
        if not had_rng:
            self.say(f"{path.name} has no RNG state for rank {self.runtime.rank} (world size changed); "
                     "this rank keeps its seeded RNG")

    def _newest_sound(self, root: Path, *, prefix: str = "", fallback: str = "falling back to an older one"):
        for path in checkpoint_candidates(root):
            problem = checkpoint_problem(path)
            if problem is None:
                return path
            self.say(f"{prefix}checkpoint {path.name} is damaged ({problem}); {fallback}")
        return None

    def resume(self) -> Path | None:
        """Load this run's newest checkpoint that passes its checksums (a damaged one is skipped, with a log
        line); None when there is none or checkpointing is off."""
        if self.checkpointer is None or not self.cfg.resume:
            return None
        path = self._newest_sound(self.root)
        if path is not None:
            self.load(path)
        return path

    def initialize_from(self, run: RunPaths) -> Path:
        """Continue another run's training on this run's data: its weights, optimizer and step, our samples."""
        path = self._newest_sound(run.checkpoints, prefix="init_from: ", fallback="trying an older one")
        if path is None:
            raise FileNotFoundError(f"train.init_from: no usable checkpoint under {run.checkpoints}")
        self.load(path, keep_data_position=True)
        return path

    def rollback_target(self) -> Path | None:
        """The newest complete checkpoint to roll back to (an async save in flight may be it); None without."""
        if self.checkpointer is None:
            return None
        self.checkpointer.wait()
        if self.runtime.distributed:
            dist.barrier()  # rank 0 has promoted it before anyone reads 'latest'
        return latest_checkpoint(self.root)

    def close(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.close()
