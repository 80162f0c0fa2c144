"""Tiered checkpoint storage: the fast tier (the run's ``train/checkpoints``, where every save lands) and durable
tiers (a directory or any fsspec URI: a mounted volume, ``s3://…``) that a background thread fills.

Copy protocol, per checkpoint and durable tier (``DurableTier.upload``): the files go into
``step-N.partial/`` on the tier, each copy is read back and compared with the checkpoint's ``checksums.json``
(size and sha256), and only then is the directory renamed to ``step-N`` and the tier's ``latest`` replaced; the
tier then keeps its newest ``keep_last`` sound checkpoints. The loop never waits on it: a complete checkpoint is
handed over as hard links (``step-N.uploading-<id>/``, instant, and immune to the fast tier pruning the original
meanwhile), and the thread copies from there. The lag (seconds from a checkpoint's promotion on the fast tier to
its verified arrival on every durable tier it is due on; the age of the oldest one still waiting) is a metric.

Restore (``restore_from_durable``, before the fast tier is planned): when a durable tier holds a sound checkpoint
newer than the fast tier's newest sound one (the fast disk was lost, or its copy is damaged), it is copied down,
verified again, and becomes the fast tier's ``latest``; a damaged durable copy is skipped (said) for the next
older one.
"""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

from runio.files import CHUNK_BYTES, sha256_stream, write_atomic
from runio.layout import RunPaths
from trainer_bridge.checkpoint.store import (
    CHECKSUMS,
    DELETING_SUFFIX,
    LATEST,
    PARTIAL_SUFFIX,
    STEP_DIR,
    UPLOADING_SUFFIX,
    checkpoint_candidates,
    checkpoint_problem,
    latest_checkpoint,
)
from trainer_bridge.config import CheckpointConfig, CheckpointTier



class TierCopyError(OSError):
    """A copy did not arrive intact (its read-back checksum differs): the tier keeps its previous checkpoints."""


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


class DurableTier:
    """One durable tier's directory of this run's checkpoints, through fsspec (local paths too)."""

    def __init__(self, uri: str, keep_last: int = 2, every: int = 1, interval: int = 1, *, coalesce: bool = True):
        import fsspec

        self.uri, self.keep_last, self.every, self.interval = uri, keep_last, every, interval
        self.coalesce = coalesce  # when the uploader is behind: only the newest due (True) or every one (False)
        self.fs, root = fsspec.core.url_to_fs(uri)
        self.root = root.rstrip("/") or "/"
        self._sound: set[str] = set()  # names this process verified (copied and read back, or checked)
        self.gate: Callable[[], None] = lambda: None  # called between chunks: the uploader waits out a save here

    def _join(self, *names: str) -> str:
        return "/".join([self.root, *names])

    def due(self, step: int, final: bool) -> bool:
        return final or step % (self.every * self.interval) == 0

    def names(self) -> list[str]:
        """Complete checkpoints on the tier (no ``.partial``), newest first."""
        try:
            entries = self.fs.ls(self.root, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted((n for n in map(_basename, entries) if STEP_DIR.fullmatch(n)), reverse=True)

    def problem(self, name: str) -> str | None:
        """Why the tier's copy of ``name`` cannot be trusted (as ``checkpoint.checkpoint_problem``), or None."""
        if name in self._sound:
            return None
        try:
            listing = json.loads(self.fs.cat_file(self._join(name, CHECKSUMS)))
        except FileNotFoundError:
            return f"no {CHECKSUMS}"
        except (OSError, ValueError) as error:
            return f"{CHECKSUMS} unreadable ({error})"
        if ".metadata" not in listing:
            return "no .metadata file"
        for file, want in sorted(listing.items()):
            problem = self._file_problem(self._join(name, file), file, want)
            if problem is not None:
                return problem
        self._sound.add(name)
        return None

    def _file_problem(self, remote: str, file: str, want: dict) -> str | None:
        try:
            size = self.fs.size(remote)
        except FileNotFoundError:
            return f"{file} is missing"
        if size != want["bytes"]:
            return f"{file} has {size} bytes, {want['bytes']} were written"
        with self.fs.open(remote, "rb") as fh:
            if sha256_stream(fh, self.gate) != want["sha256"]:
                return f"{file} does not match its checksum"
        return None

    # -- upload -------------------------------------------------------------------------------------------
    def upload(self, source: Path, name: str) -> None:
        """Copy the complete checkpoint in ``source`` to the tier as ``name``, verified; then prune."""
        listing = json.loads((source / CHECKSUMS).read_text(encoding="utf-8"))
        partial, final = self._join(name + PARTIAL_SUFFIX), self._join(name)
        self.gate()
        if self.fs.exists(partial):
            self.fs.rm(partial, recursive=True)
        self.fs.makedirs(partial, exist_ok=True)
        for file in sorted(source.iterdir()):
            if file.is_file():
                self._put(file, f"{partial}/{file.name}")
        for file, want in sorted(listing.items()):
            problem = self._file_problem(f"{partial}/{file}", file, want)
            if problem is not None:
                self.fs.rm(partial, recursive=True)
                raise TierCopyError(f"{self.uri}: copy of {name} is damaged ({problem}); not kept")
        if self.fs.cat_file(f"{partial}/{CHECKSUMS}") != (source / CHECKSUMS).read_bytes():
            self.fs.rm(partial, recursive=True)
            raise TierCopyError(f"{self.uri}: copy of {name}/{CHECKSUMS} differs; not kept")
        self.gate()
        if self.fs.exists(final):  # the same step saved again (after a rollback): replace it
            self.fs.rm(final, recursive=True)
        self.fs.mv(partial, final, recursive=True)
        self._sound.add(name)
        self.fs.pipe_file(self._join(LATEST), (name + "\n").encode())
        self.prune()

    def _put(self, local: Path, remote: str) -> None:
        """Copy one file up in 1 MiB chunks, through the gate between them."""
        with open(local, "rb") as source, self.fs.open(remote, "wb") as target:
            while True:
                self.gate()
                chunk = source.read(CHUNK_BYTES)
                if not chunk:
                    return
                target.write(chunk)

    def prune(self) -> list[str]:
        """Keep the newest ``keep_last`` sound checkpoints (a damaged one never counts, as on the fast tier)."""
        sound, deleted = 0, []
        for name in self.names():
            if sound >= self.keep_last:
                self.gate()
                self.fs.rm(self._join(name), recursive=True)
                self._sound.discard(name)
                deleted.append(name)
            elif self.problem(name) is None:
                sound += 1
        return deleted

    # -- restore ------------------------------------------------------------------------------------------
    def download(self, name: str, fast_root: Path) -> Path:
        """Copy ``name`` into the fast tier (verified there too) and make it the fast tier's ``latest`` when it is
        newer than what ``latest`` names; return its local path."""
        fast_root.mkdir(parents=True, exist_ok=True)
        partial = fast_root / (name + PARTIAL_SUFFIX)
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        for remote in self.fs.ls(self._join(name), detail=False):
            self.fs.get_file(remote, str(partial / _basename(remote)))
        problem = checkpoint_problem(partial)
        if problem is not None:
            shutil.rmtree(partial, ignore_errors=True)
            raise TierCopyError(f"{self.uri}: {name} arrived damaged ({problem})")
        final = fast_root / name
        if final.exists():
            doomed = final.with_name(final.name + DELETING_SUFFIX)
            os.replace(final, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        os.replace(partial, final)
        current = latest_checkpoint(fast_root)
        if current is None or current.name <= name:
            write_atomic(fast_root / LATEST, (name + "\n").encode())
        return final

    def set_aside(self, stamp: str) -> str | None:
        """``--from-scratch``: move the tier's checkpoints to ``<run>/set-aside-<stamp>-checkpoints``."""
        if not self.fs.exists(self.root):
            return None
        target = f"{self.root.rsplit('/', 1)[0]}/set-aside-{stamp}-checkpoints"
        self.fs.mv(self.root, target, recursive=True)
        return target


def durable_tiers(cfg: CheckpointConfig, paths: RunPaths) -> list[DurableTier]:
    return [DurableTier(paths.durable_checkpoints(t.path), t.keep_last, t.every, cfg.interval, coalesce=t.coalesce)
            for t in cfg.durable_tiers if isinstance(t, CheckpointTier) and t.path]


def newest_sound_local(root: Path) -> str | None:
    for path in checkpoint_candidates(root):
        if checkpoint_problem(path) is None:
            return path.name
    return None


def restore_from_durable(cfg: CheckpointConfig, paths: RunPaths, say: Callable[[str], None]) -> Path | None:
    """Copy down the newest sound durable checkpoint when it is newer than the fast tier's newest sound one;
    return its fast-tier path, or None when the fast tier is as new (or there is no durable tier). One process
    (rank 0, or the launcher before any rank starts) calls it."""
    if not (cfg.enabled and cfg.resume):
        return None
    local = newest_sound_local(paths.checkpoints) or ""
    best: tuple[DurableTier, str] | None = None
    for tier in durable_tiers(cfg, paths):
        try:
            for name in tier.names():
                if name <= local or (best is not None and name <= best[1]):
                    break
                problem = tier.problem(name)
                if problem is None:
                    best = (tier, name)
                    break
                say(f"durable tier {tier.uri}: checkpoint {name} is damaged ({problem}); trying an older one")
        except OSError as error:  # an unreachable tier must not stop a resume the fast tier can do
            say(f"durable tier {tier.uri}: not readable ({type(error).__name__}: {error}); not used for this resume")
    if best is None:
        return None
    tier, name = best
    try:
        path = tier.download(name, paths.checkpoints)
    except OSError as error:
        say(f"durable tier {tier.uri}: {name} could not be restored ({error}); resuming from the fast tier")
        return None
    say(f"restored {name} from the durable tier {tier.uri} (the fast tier's newest sound checkpoint: "
        f"{local or 'none'})")
    return path


class TierUploader:
    """The background thread that fills the durable tiers (rank 0 only). ``submit`` never blocks on them.

    It stays out of the loop's way three times over: the thread runs at the lowest CPU priority (nice 19, a
    per-thread value on Linux); while the loop does checkpoint work (``pause``/``resume``: promoting a finished
    async save, the blocking part of a save, and an async save's background write) it waits, between 1 MiB
    chunks and before every other file system operation of a copy; and it coalesces: when it falls behind (more
    than one checkpoint waiting for a tier when it takes up work), it copies only the newest one due on that tier
    and drops the older hand-overs (``skipped``), instead of a queue whose writeback would compete with the
    next saves. The lag of a coalesced copy counts from the oldest checkpoint it stood in for."""

    def __init__(self, tiers: list[DurableTier], say: Callable[[str], None], clock: Callable[[], float] = time.time):
        self.tiers, self.say, self.clock = tiers, say, clock
        self.uploaded: list[tuple[str, str]] = []  # (tier uri, checkpoint name), in order
        self.skipped: list[tuple[str, str]] = []  # (tier uri, checkpoint name) superseded before its copy began
        self.failures = 0
        self.last_lag_s = 0.0
        self._waiting: dict[str, float] = {}  # hand-over directory -> submitted at (of the oldest it stands for)
        self._lock = threading.Condition()
        self._pending: list[tuple[Path, str, list[DurableTier]]] = []  # submitted, not yet taken up
        self._busy = False
        self._closing = False
        self._go = threading.Event()
        self._go.set()
        for tier in tiers:
            tier.gate = self._go.wait
        self._thread = threading.Thread(target=self._run, name="corpusmill-tier-uploader", daemon=True)
        self._thread.start()

    def submit(self, path: Path, step: int, final: bool) -> None:
        due = [t for t in self.tiers if t.due(step, final)]
        if not due:
            return
        staging = path.with_name(f"{path.name}{UPLOADING_SUFFIX}{uuid.uuid4().hex[:8]}")
        staging.mkdir()
        for file in path.iterdir():
            if file.is_file():
                try:
                    os.link(file, staging / file.name)
                except OSError:  # no hard links on this file system: a copy, still off the durable tier
                    shutil.copy2(file, staging / file.name)
        with self._lock:
            self._waiting[str(staging)] = self.clock()
            self._pending.append((staging, path.name, due))
            self._lock.notify_all()

    def pause(self) -> None:
        """The loop is doing checkpoint work (a promotion, a save, an async save's background write): the copies
        pause, between chunks and before each file system operation, until ``resume``."""
        self._go.clear()

    def resume(self) -> None:
        self._go.set()

    def lag_seconds(self) -> float:
        """Age of the oldest checkpoint not yet on every durable tier it is due on (a skipped one counts until
        the newer copy that stands for it has arrived); else the last one's lag."""
        with self._lock:
            oldest = min(self._waiting.values(), default=None)
        return self.clock() - oldest if oldest is not None else self.last_lag_s

    def _take(self) -> list[tuple[Path, str, list[DurableTier]]] | None:
        """Everything submitted so far, coalesced: each tier gets only the newest checkpoint due on it. Returns
        (staging, name, tiers) to copy, oldest first; None once closing with nothing left."""
        with self._lock:
            while not self._pending and not self._closing:
                self._lock.wait()
        self._go.wait()  # not even start while the loop is checkpointing (what arrives meanwhile joins the batch)
        with self._lock:
            if not self._pending:
                return None
            batch, self._pending = self._pending, []
            self._busy = True
            newest: dict[int, int] = {}  # id(tier) -> index in the batch of the newest item due on it
            for index, (_, _, due) in enumerate(batch):
                for tier in due:
                    newest[id(tier)] = index
            work, dropped, said = [], [], []
            for index, (staging, name, due) in enumerate(batch):
                keep = [t for t in due if not t.coalesce or newest[id(t)] == index]
                for tier in due:
                    if tier.coalesce and newest[id(tier)] != index:  # superseded: the newer copy's lag counts from this one
                        self.skipped.append((tier.uri, name))
                        said.append(f"durable tier {tier.uri}: {name} not copied, {batch[newest[id(tier)]][1]} is "
                                    f"copied in its place (the uploader was behind; coalesce: false copies each)")
                        stand_in = str(batch[newest[id(tier)]][0])
                        self._waiting[stand_in] = min(self._waiting[stand_in], self._waiting[str(staging)])
                if keep:
                    work.append((staging, name, keep))
                else:
                    dropped.append(staging)
                    self._waiting.pop(str(staging), None)
        for line in said:
            self.say(line)
        for staging in dropped:
            shutil.rmtree(staging, ignore_errors=True)
        return work

    def _run(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):  # not Linux, or not allowed: the pauses during saves still apply
            pass
        while True:
            work = self._take()
            if work is None:
                return
            try:
                for staging, name, due in work:
                    try:
                        for tier in due:
                            try:
                                tier.upload(staging, name)
                                self.uploaded.append((tier.uri, name))
                            except Exception as error:  # noqa: BLE001 - a durable tier's failure never stops training
                                self.failures += 1
                                self.say(f"durable tier {tier.uri}: {name} not copied ({type(error).__name__}: "
                                         f"{error})")
                    finally:
                        shutil.rmtree(staging, ignore_errors=True)
                        with self._lock:
                            submitted = self._waiting.pop(str(staging), None)
                        if submitted is not None:
                            self.last_lag_s = self.clock() - submitted
            finally:
                with self._lock:
                    self._busy = False
                    self._lock.notify_all()

    def drain(self) -> None:
        """Wait until everything submitted has been copied (or failed, or was superseded)."""
        with self._lock:
            while self._pending or self._busy:
                self._lock.wait()

    def close(self) -> None:
        self.drain()
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        self._thread.join()
