"""Checkpoints with torch.distributed.checkpoint (DCP): exact resume, any world size, atomic, kept-last-N.

Layout under ``<run>/train/checkpoints/``:
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
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import time
import warnings
from pathlib import Path

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


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_checksums(path: Path) -> None:
    """Record size and sha256 of every file of a complete save, so that a damaged checkpoint is detected
    before it is loaded (DCP itself would load flipped bytes silently)."""
    files = {p.name: {"bytes": p.stat().st_size, "sha256": _file_sha256(p)}
             for p in sorted(path.iterdir()) if p.is_file() and p.name != CHECKSUMS}
    (path / CHECKSUMS).write_text(json.dumps(files, indent=1, sort_keys=True))


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
        if _file_sha256(file) != want["sha256"]:
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


class Checkpointer:
    """Saves and loads the training state; one instance per process, all ranks call every method."""

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

    # -- state --------------------------------------------------------------------------------------------
    def _state(self, parts, optimizers, train_state: dict[str, torch.Tensor], include_rng: bool = True):
        model_sd, optim_sd = {}, {}
        for part, optimizer in zip(parts, optimizers):
            model_sd.update(get_model_state_dict(part))
            optim_sd.update(get_optimizer_state_dict(part, optimizer)["state"])
        state = {"model": model_sd, "optim": optim_sd, "train": dict(train_state)}
        if include_rng:
            state["rng"] = {f"rank{self.runtime.rank}": devices.rng_states(self.runtime.device)}
        return state

    # -- save ---------------------------------------------------------------------------------------------
    def save(self, step: int, parts, optimizers, train_state: dict[str, torch.Tensor]) -> None:
        self.wait()
        start = time.perf_counter()
        final = self.root / step_dir_name(step)
        partial = self.root / (step_dir_name(step) + PARTIAL_SUFFIX)
        state = self._state(parts, optimizers, train_state)
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
        pointer_tmp = self.root / (LATEST + ".tmp")
        pointer_tmp.write_text(final.name + "\n")
        os.replace(pointer_tmp, self.root / LATEST)
        complete = sorted(p for p in self.root.glob("step-*") if p.is_dir() and not p.name.endswith(PARTIAL_SUFFIX))
        for old in complete[: -self.cfg.keep_last]:
            shutil.rmtree(old, ignore_errors=True)

    # -- load ---------------------------------------------------------------------------------------------
    def load(self, path: Path, parts, optimizers, train_state: dict[str, torch.Tensor]) -> bool:
        """Load ``path`` into the model parts, optimizers and ``train_state`` (in place).

        Returns whether this rank's RNG states were restored (only when the checkpoint has this rank's)."""
        keys = saved_keys(path)
        rng_key_prefix = f"rng.rank{self.runtime.rank}."
        has_rng = any(k.startswith(rng_key_prefix) for k in keys)
        state = self._state(parts, optimizers, train_state, include_rng=has_rng)
        template_groups = [get_optimizer_state_dict(p, o)["param_groups"] for p, o in zip(parts, optimizers)]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(state, checkpoint_id=str(path), storage_reader=SafeFileSystemReader(path),
                     no_dist=not self.runtime.distributed)
        for part, optimizer, groups in zip(parts, optimizers, template_groups):
            names = set(get_model_state_dict(part).keys())
            set_model_state_dict(part, {k: v for k, v in state["model"].items() if k in names},
                                 options=StateDictOptions(strict=True))
            set_optimizer_state_dict(part, optimizer, {
                "state": {k: v for k, v in state["optim"].items() if k in names}, "param_groups": groups})
        train_state.update(state["train"])
        if has_rng:
            devices.set_rng_states(self.runtime.device, state["rng"][f"rank{self.runtime.rank}"])
        return has_rng

    def close(self) -> None:
        self.wait()
        if self.async_group is not None:
            dist.destroy_process_group(self.async_group)
            self.async_group = None
