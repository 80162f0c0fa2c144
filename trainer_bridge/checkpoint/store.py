"""Checkpoints with torch.distributed.checkpoint (DCP): exact resume, any world size, atomic, kept-last-N.

Layout under ``RunPaths.checkpoints`` (``<run>/train/checkpoints/``):
    step-00000100/          a complete DCP checkpoint (each rank wrote its shards; rank 0 the metadata)
    step-00000200.partial/  a save in progress or interrupted: never loaded, removed at the next start
    latest                  text file naming the newest complete checkpoint, replaced atomically

Inside a checkpoint, besides DCP's files: ``model_config.json`` (the resolved model config; the name
``run_model.checkpoint_model_config`` reads) and ``provenance.json`` (the step, the run's ``train.steps`` and the shards'
identity: the manifest's sha256 and each shard's), both covered by ``checksums.json`` like the tensors. A resume
with another model or other shards is refused, naming what differs (``resume_problem``), and so is one whose
newest sound checkpoint is past ``train.steps`` (nothing to train: ``past_train_steps``).

Retention keeps the newest ``keep_last`` *sound* checkpoints (verified before pruning): a damaged one never
counts, so the newest sound checkpoint is never deleted. When checkpoints exist but none is sound, training
refuses to start from scratch (``TrainRefused``), as it does with ``checkpoint.resume: false`` beside any
checkpoint (``refuse_training_anew_beside``: one folder never holds two runs' checkpoints); ``set_aside`` moves
a run's checkpoints and training logs out of the way for ``corpusmill train --from-scratch``.

A save is written into ``.partial`` and renamed only once DCP has written its metadata (which DCP does after
every rank reported its writes), then ``latest`` is replaced by ``os.replace``: an interrupted save can never
become "latest".

What is saved (tensors only, so that loading unpickles nothing but DCP's own metadata, and that through an
allow-list): model parameters and AdamW state by fully-qualified name (DCP reshards them to the loading
topology), the train state (step, global sample index = data state, tokens seen, counters, loss scale, guard
statistics; the LR schedule is a pure function of the step) and every rank's RNG states.

``Checkpointer`` does the DCP saving and loading; ``manager.CheckpointManager``, the training loop's checkpoint
component (cadence, the start's checkpoint, rollback target), uses it.
"""
from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import signal
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

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
from runio.ledger import LedgerEntry, read_ledger
from runio.layout import RunPaths
from trainer_bridge.parallel import device as devices
from trainer_bridge.checkpoint.names import (  # noqa: F401 (re-exported: the store's names, where callers look)
    PROVENANCE_FILE,
    STEP_DIR,
    complete_checkpoints,
    read_checkpoint_json,
    step_dir_name,
    step_of,
)
from trainer_bridge.config import CheckpointConfig
from trainer_bridge.loop.data import shards_difference
from trainer_bridge.outcomes import TrainRefused, raise_terminated

LATEST = "latest"
BEST = "best"  # names the sound checkpoint with the lowest validation loss (provenance.json "val_loss")
PARTIAL_SUFFIX = ".partial"
UPLOADING_SUFFIX = ".uploading-"  # a hard-linked hand-over copy for the tier uploader (trainer_bridge/checkpoint/tiers.py)
DELETING_SUFFIX = ".deleting"  # an old checkpoint being pruned: renamed first, so a half-deleted one never loads
MODEL_CONFIG_FILE = "model_config.json"  # the resolved ModelConfig
SET_ASIDE_PREFIX = "set-aside-"
# Model settings that do not change a trained model (only how a fresh one is initialized).
MODEL_KEYS_NOT_COMPARED = frozenset({"init_std"})


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
    complete = complete_checkpoints(root)[::-1]
    newest = latest_checkpoint(Path(root))
    if newest is not None:
        complete = [p for p in complete if p.name <= newest.name]
    return complete


def _file_signature(path: Path) -> tuple:
    return tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(path.iterdir()) if p.is_file())


class SoundnessCache:
    """``checkpoint_problem`` results of this process, reused while no file of the checkpoint changed (size and
    mtime): pruning after every save then hashes only the checkpoints it has not verified yet."""

    def __init__(self):
        self._sound: dict[str, tuple] = {}

    def mark_sound(self, path: Path) -> None:
        self._sound[str(path)] = _file_signature(path)

    def problem(self, path: Path) -> str | None:
        try:
            signature = _file_signature(path)
        except OSError as error:
            return f"unreadable ({error.strerror})"
        if self._sound.get(str(path)) == signature:
            return None
        problem = checkpoint_problem(path)
        if problem is None:
            self._sound[str(path)] = signature
        return problem


def best_checkpoint(root: Path) -> Path | None:
    """The checkpoint ``best`` names (it may since have been damaged: callers check); None without one."""
    pointer = Path(root) / BEST
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return Path(root) / name if STEP_DIR.fullmatch(name) else None


def prune_checkpoints(root: Path, keep_last: int, cache: SoundnessCache | None = None) -> list[Path]:
    """Delete checkpoints older than the ``keep_last``-th newest *sound* one; return those deleted.

    Newest first: a sound checkpoint counts toward ``keep_last``, a damaged one does not (it stays while it is
    newer than the last sound one kept, so that the damage can be inspected). Only checkpoints up to the one
    ``latest`` names are considered. The best-validation checkpoint (``best``) is always kept."""
    cache = cache or SoundnessCache()
    sound, deleted = 0, []
    best = best_checkpoint(root)
    for path in checkpoint_candidates(root):
        if path == best:
            sound += cache.problem(path) is None
            continue
        if sound >= keep_last:
            doomed = path.with_name(path.name + DELETING_SUFFIX)
            os.replace(path, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
            deleted.append(path)
        elif cache.problem(path) is None:
            sound += 1
    return deleted


@contextmanager
def interrupts_deferred():
    """A Ctrl-C (or a SIGTERM to training alone) during a save takes effect when the save is complete, in a
    process where the signal raises an exception: SIGINT's ``KeyboardInterrupt``, SIGTERM's
    ``outcomes.Terminated`` (``launch.sigterm_raises``). DCP catches every exception of a save, those included,
    and raises it again wrapped in a CheckpointException with its traceback; and a half-promoted save is worth
    finishing. A torchrun worker exits at once instead (``launch._exit_quietly``): nothing to defer there."""
    raising = {}
    if threading.current_thread() is threading.main_thread():
        raising = {sig: handler for sig, handler in ((signal.SIGINT, signal.default_int_handler),
                                                     (signal.SIGTERM, raise_terminated))
                   if signal.getsignal(sig) is handler}
    if not raising:
        yield
        return
    received = []
    for sig in raising:
        signal.signal(sig, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        for sig, handler in raising.items():
            signal.signal(sig, handler)
    if received:
        raising[received[0]](received[0], None)  # raises what the signal raises


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

    def __init__(self, root: Path, cfg: CheckpointConfig, runtime: devices.Runtime,
                 describe: Callable[[int], dict[str, dict]] | None = None,
                 on_promoted: Callable[[Path, int], None] | None = None):
        """``describe(step)``: JSON files (name -> object) written into each checkpoint before its checksums;
        ``on_promoted(path, step)``: called on rank 0 once a checkpoint is complete (the tier uploader)."""
        self.root = Path(root)
        self.cfg = cfg
        self.runtime = runtime
        self.describe = describe
        self.on_promoted = on_promoted
        self.soundness = SoundnessCache()
        # Async saves run collectives in a background thread: on the training group they would interleave
        # with training collectives and gloo aborts (ENVIRONMENT.md). They get a group of their own.
        self.async_group = (dist.new_group(backend=devices.side_channel_backend())
                            if cfg.async_save and runtime.distributed else None)
        self._pending = None  # (future, partial_path, step)
        self.val_losses: dict[int, float] = {}  # step -> validation loss, for provenance.json and ``best``
        # step -> the data position saved with it (global sample index, tokens seen), for provenance.json: what
        # the checkpoint had consumed, readable without loading tensors (``lineage``'s data cards).
        self.positions: dict[int, dict[str, int]] = {}
        self.last_blocking_seconds = 0.0
        self.promotions = 0  # async saves promoted so far (each by ``wait``, on the loop's thread)
        if runtime.is_main:
            self.root.mkdir(parents=True, exist_ok=True)
            for stale in [*self.root.glob("*" + PARTIAL_SUFFIX), *self.root.glob("*" + DELETING_SUFFIX),
                          *self.root.glob("*" + UPLOADING_SUFFIX + "*")]:
                shutil.rmtree(stale, ignore_errors=True)
        if runtime.distributed:
            dist.barrier()

    # -- save ---------------------------------------------------------------------------------------------
    def save(self, step: int, parts, optimizers, train_state: dict[str, torch.Tensor]) -> None:
        with interrupts_deferred():
            self._save(step, parts, optimizers, train_state)

    def _save(self, step: int, parts, optimizers, train_state: dict[str, torch.Tensor]) -> None:
        self.wait()
        start = time.perf_counter()
        final = self.root / step_dir_name(step)
        partial = self.root / (step_dir_name(step) + PARTIAL_SUFFIX)
        state = _full_state(self.runtime, parts, optimizers, train_state)
        if "progress" in train_state:  # the loop's Progress: step, samples, tokens_seen, ...
            progress = [int(v) for v in train_state["progress"][:3]]
            self.positions[step] = {"samples": progress[1], "tokens_seen": progress[2]}
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

    @property
    def in_flight(self) -> bool:
        """An async save is still being written."""
        return self._pending is not None

    def poll(self) -> None:
        """Promote a finished async save; never blocks."""
        if self._pending is not None and self._pending[0].done():
            self.wait()

    def wait(self) -> None:
        if self._pending is None:
            return
        future, partial, step = self._pending
        self._pending = None
        self.promotions += 1
        with interrupts_deferred():
            future.result()
            self._promote(partial, self.root / step_dir_name(step))

    def _promote(self, partial: Path, final: Path) -> None:
        # DCP's finish step (rank 0 writes .metadata after gathering every rank's write results) has run once
        # the save returned on rank 0: the checkpoint is complete.
        if not self.runtime.is_main:
            return
        step = step_of(final)
        val_loss = self.val_losses.get(step)
        position = self.positions.pop(step, None)
        for name, value in (self.describe(step) if self.describe else {}).items():
            if name == PROVENANCE_FILE and val_loss is not None:
                value = {**value, "val_loss": val_loss}
            if name == PROVENANCE_FILE and position is not None:
                value = {**value, **position}
            write_json(partial / name, value, indent=2, sort_keys=True)
        write_checksums(partial)
        if final.exists():  # the same step saved again (after a rollback or a damaged copy): replace it
            doomed = final.with_name(final.name + DELETING_SUFFIX)
            os.replace(final, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        os.replace(partial, final)
        self.soundness.mark_sound(final)  # its files were hashed a moment ago by write_checksums
        write_atomic(self.root / LATEST, (final.name + "\n").encode())
        if val_loss is not None and math.isfinite(val_loss) and val_loss < self._best_val_loss(final):
            write_atomic(self.root / BEST, (final.name + "\n").encode())
        prune_checkpoints(self.root, self.cfg.fast_keep_last, self.soundness)
        if self.on_promoted is not None:
            self.on_promoted(final, step)

    def _best_val_loss(self, final: Path) -> float:
        """The validation loss of the checkpoint ``best`` names (inf without one, or when it is ``final`` itself
        saved again, or gone)."""
        best = best_checkpoint(self.root)
        if best is None or best == final or not best.is_dir():
            return math.inf
        value = (read_checkpoint_json(best, PROVENANCE_FILE) or {}).get("val_loss")
        return float(value) if isinstance(value, (int, float)) else math.inf

    def load(self, path: Path, parts, optimizers, train_state: dict[str, torch.Tensor]) -> bool:
        return load_checkpoint(path, self.runtime, parts, optimizers, train_state)

    def close(self) -> None:
        self.wait()
        if self.async_group is not None:
            dist.destroy_process_group(self.async_group)
            self.async_group = None


# ------------------------------------------------------------------------------ what a checkpoint belongs to

@dataclass(frozen=True)
class RunIdentity:
    """What makes a checkpoint resumable by this run: the resolved model config (``ModelConfig.model_dump``),
    the shards (``data.shards_identity``) and the run's ``train.steps``."""

    model: dict
    shards: dict | None
    train_steps: int
    world_size: int | None = None  # recorded in provenance.json (an elastic resume names the change), not matched
    init_from: str | None = None  # ``train.init_from``: recorded (a model card names what training started from)

    def files(self, step: int) -> dict[str, dict]:
        """The JSON files written into the checkpoint of ``step``."""
        provenance = {"step": step, "train_steps": self.train_steps, "saved_at": time.time()}
        if self.world_size is not None:
            provenance["world_size"] = self.world_size
        if self.shards is not None:
            provenance["shards"] = self.shards
        if self.init_from:
            provenance["init_from"] = self.init_from
        return {MODEL_CONFIG_FILE: self.model, PROVENANCE_FILE: provenance}


def model_difference(saved: dict, current: dict) -> list[str]:
    """``train.model.KEY saved → current`` for every model setting that differs (init_std aside)."""
    return [f"train.model.{key} {saved.get(key)} → {current.get(key)}"
            for key in sorted(set(saved) | set(current))
            if key not in MODEL_KEYS_NOT_COMPARED and saved.get(key) != current.get(key)]


def resume_problem(path: Path, identity: RunIdentity, *, compare_shards: bool = True) -> str | None:
    """Why checkpoint ``path`` (sound) cannot continue this run: another model, or other shards; None if it can."""
    differences = []
    model = read_checkpoint_json(path, MODEL_CONFIG_FILE)
    if model is not None:
        differences += model_difference(model, identity.model)
    provenance = read_checkpoint_json(path, PROVENANCE_FILE) or {}
    if compare_shards and identity.shards is not None and provenance.get("shards") is not None:
        differences += [f"shards: {d}" for d in shards_difference(provenance["shards"], identity.shards)]
    if not differences:
        return None
    return "; ".join(differences)


WHAT_TO_DO = ("restore the old settings or shards, choose another run name, pass --from-scratch to set the "
              "checkpoints aside and start over, or start a new run with train.init_from")


def forgotten_since(path: Path, ledger: Path | None) -> LedgerEntry | None:
    """The latest takedown (``corpusmill forget``) in ``ledger`` made after checkpoint ``path`` was saved, or
    None: then the shards that changed under it changed because documents were forgotten."""
    if ledger is None:
        return None
    saved_at = (read_checkpoint_json(path, PROVENANCE_FILE) or {}).get("saved_at")
    later = []
    for entry in read_ledger(ledger):
        try:
            made = datetime.strptime(entry.time, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            made = None
        if saved_at is None or made is None or made >= float(saved_at) - 1:
            later.append(entry)
    return later[-1] if later else None


def takedown_refusal(path: Path, entry: LedgerEntry, ledger: Path) -> str:
    """One line: the checkpoint saw documents since forgotten; the way forward is ``--from-scratch`` (continuing
    it, even on the remaining data, keeps what it learnt from them in the weights)."""
    return (f"{path.name} was trained on documents since forgotten (`corpusmill forget` {entry.time}, "
            f"{len(entry.doc_ids)} documents, reason {entry.reason!r}; ledger {ledger}), and the shards changed under "
            f"it: refusing to resume; pass --from-scratch to train anew on the documents that remain (the "
            f"checkpoints are set aside, not deleted)")


def plan_resume(root: Path, identity: RunIdentity, *, say: Callable[[str], None] | None = None,
                soundness: SoundnessCache | None = None, takedown_ledger: Path | None = None) -> Path | None:
    """The checkpoint this run resumes from: the newest sound one (each damaged one skipped is said through
    ``say``), or None when there is no checkpoint at all. Raises ``TrainRefused`` when checkpoints exist but none
    is sound, when the newest sound one was trained with another model or on other shards, or when it is past
    the run's ``train.steps`` (a checkpoint at ``train.steps`` is a finished run: resumed, nothing left to do)."""
    soundness = soundness or SoundnessCache()
    damaged = []
    for path in checkpoint_candidates(root):
        problem = soundness.problem(path)
        if problem is None:
            mismatch = resume_problem(path, identity)
            forgotten = forgotten_since(path, takedown_ledger) if mismatch and "shards: " in mismatch else None
            if forgotten is not None:
                raise TrainRefused(takedown_refusal(path, forgotten, takedown_ledger))
            if mismatch is not None:
                raise TrainRefused(f"{path.name} was trained with a different configuration ({mismatch}): refusing "
                                   f"to resume; {WHAT_TO_DO}")
            if step_of(path) > identity.train_steps:
                raise TrainRefused(past_train_steps(root, path, identity.train_steps))
            return path
        damaged.append(f"{path.name} ({problem})")
        if say is not None:
            say(f"checkpoint {path.name} is damaged ({problem}); falling back to an older one")
    if damaged:
        raise TrainRefused(f"no sound checkpoint to resume from in {root}: {', '.join(damaged)}; refusing to start "
                           "from scratch (pass --from-scratch to set them aside and start over)")
    return None


def past_train_steps(root: Path, newest: Path, train_steps: int) -> str:
    """Why a run whose newest sound checkpoint ``newest`` is past ``train_steps`` is refused, and what to do.
    Resuming it would train nothing and report the run done; starting over beside it would mix two runs'
    checkpoints."""
    step = step_of(newest)
    within = next((p for p in checkpoint_candidates(root)
                   if step_of(p) <= train_steps and checkpoint_problem(p) is None), None)
    earlier = (f"; `corpusmill export RUN_DIR --step {step_of(within)}` exports the newest checkpoint within "
               f"train.steps ({within.name})" if within is not None else "")
    return (f"{newest.name}, the newest sound checkpoint, is past train.steps ({train_steps}): nothing to train; set "
            f"train.steps to {step} or more to continue it, or pass --from-scratch to set the checkpoints aside and "
            f"train anew{earlier}")


def refuse_training_anew_beside(root: Path, durable_tiers=()) -> None:
    """``checkpoint.resume: false`` trains from step 0. Beside checkpoints of an earlier run, in ``root`` or on a
    durable tier (``tiers.DurableTier``), its saves would mix two runs in one folder (and ``latest``/``best``
    name either run's): refused (``TrainRefused``); starting over is ``--from-scratch``, which sets them aside
    first."""
    places = [(str(root), [p.name for p in complete_checkpoints(root)])]
    for tier in durable_tiers:
        try:
            places.append((tier.uri, tier.names()))
        except OSError as error:
            raise TrainRefused(f"train.checkpoint.resume is false, and durable tier {tier.uri} cannot be read "
                               f"({type(error).__name__}: {error}) to check that it holds no checkpoints of an "
                               "earlier run") from None
    for where, names in places:
        if names:
            raise TrainRefused(f"train.checkpoint.resume is false, but {where} holds checkpoints "
                               f"({', '.join(sorted(names))}): training anew there would mix two runs' checkpoints; "
                               "pass --from-scratch to set them aside and start over, or set "
                               "train.checkpoint.resume: true to continue from the newest")


def start_without_checkpoints(paths: RunPaths, say: Callable[[str], None]) -> None:
    """``checkpoint.enabled: false`` trains from step 0 and saves nothing. Beside an earlier training's
    checkpoints (which the user may have meant to continue) that is refused (``TrainRefused``); an earlier
    attempt's training logs alone are set aside (``set_aside``, nothing deleted, said in a line), so the new
    run's ``metrics.jsonl`` is never appended to another run's."""
    names = [p.name for p in complete_checkpoints(paths.checkpoints)]
    if names:
        raise TrainRefused(f"train.checkpoint.enabled is false, so training starts at step 0, but {paths.checkpoints}"
                           f" holds checkpoints ({', '.join(sorted(names))}): enable checkpoints to continue from "
                           "the newest, or pass --from-scratch to set them aside and start over")
    if any(p.exists() for p in training_logs(paths)):
        say(f"train.checkpoint.enabled is false, so training starts at step 0: an earlier attempt's training logs "
            f"were moved to {set_aside(paths)}")


def training_logs(paths: RunPaths) -> tuple[Path, ...]:
    """Every file the trainer writes under ``train/`` about one run (besides its checkpoints): what
    ``set_aside`` moves with them, so that a new run's report shows nothing of the old one. (``train_config.json``
    is rewritten by every start; ``RESUME`` is the operator's signal, not the run's.)"""
    return (paths.metrics_jsonl, paths.recovery_jsonl, paths.alerts_jsonl, paths.samples_jsonl, paths.tensorboard,
            paths.paused, paths.data_order_jsonl)


def set_aside(paths: RunPaths) -> Path | None:
    """For a start from scratch: move the run's checkpoints and training logs (``training_logs``) into
    ``train/set-aside-<time>/`` (nothing is deleted); return that directory, or None when there was nothing to
    move."""
    moving = [p for p in (paths.checkpoints, *training_logs(paths)) if p.exists()]
    if not moving:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    target = paths.train / f"{SET_ASIDE_PREFIX}{stamp}"
    suffix = 1
    while target.exists():
        suffix += 1
        target = paths.train / f"{SET_ASIDE_PREFIX}{stamp}-{suffix}"
    target.mkdir(parents=True)
    for path in moving:
        os.replace(path, target / path.name)
    return target
