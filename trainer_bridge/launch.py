"""Starting training: in this process (one rank) or through torchrun (pp × dp ranks, one or more nodes).

``run_training(cfg)`` is what ``corpusmill train`` and ``make demo`` call. Before any rank starts it checks,
once (``preflight``): that the run directory can be written, the shards (``train.verify_shards``), the model
config against the shards, and the checkpoints (one to resume from, sound and trained with this model on these
shards; or none at all) — a problem found there ends the run with one line and the exit code of
``trainer_bridge.outcomes``, before a process is started. It writes the resolved train config to
``RunPaths.train_config`` (``<run>/train/train_config.json``) and, when the mesh has more than one rank (or a
multi-node rendezvous is asked for), starts ``torchrun`` whose workers run ``python -m trainer_bridge.launch`` on
that file. A worker restarted by torchrun (``--max-restarts``) resumes from the latest checkpoint by itself; the
restarted group forms its process group in a store namespace of its own (``device.group_store``).

The rendezvous store. torchrun's own (``--standalone`` or ``--rdzv-backend=c10d``) listens on every interface
whatever host it is given (a TCPStore server binds the wildcard address), and so does the agent's second store
that it shares with the workers. Instead the launcher hosts the job's store itself, on a socket it bound to one
address — 127.0.0.1 on a single node, the ``--rdzv-endpoint`` address on the node that owns it for a multi-node
``c10d`` job — and hands the listening socket to ``TCPStore(master_listen_fd=...)``. torchrun only connects to
it (``--rdzv-conf=is_host=false``, ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``) and the workers connect to it too
(``device.STORE_ENDPOINT_ENV``). On a single node gloo is bound to the loopback interface as well
(``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME``, unless set): no socket of the job listens beyond 127.0.0.1.

Interrupts. torchrun runs in a session of its own, so a Ctrl-C reaches only the launcher, which stops the job
once (SIGINT to torchrun, which passes it to the workers; they exit at once and quietly), drops the output that
follows, and says in one line that the last checkpoint is kept; a second Ctrl-C kills torchrun. A SIGTERM to
the launcher does the same (exit code 143 instead of 130). Training in this process (one rank) ends after a
Ctrl-C or a SIGTERM with the same line and code (``sigterm_raises``), a save in progress finished first. A rank
that meets an expected failure (``outcomes.outcome_of``) leaves its one line in the launcher's outcome
directory; the launcher then stops the job and prints that line instead of every rank's traceback and
torchrun's report.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable

from beamio.logs import quiet_logging
from runio.errors import ExitCode
from runio.files import write_json
from runio.layout import RunPaths
from trainer_bridge.checkpoint.recovery import ELASTIC_ENV
from trainer_bridge.checkpoint.start import StartPlan, plan_start
from trainer_bridge.checkpoint.store import latest_checkpoint
from trainer_bridge.config import TrainConfig
from trainer_bridge.loop.data import has_split, open_split
from trainer_bridge.loop.train import TrainHooks, expected_tokenizer_sha256, resolve_model_config, run_identity, train
from trainer_bridge.outcomes import (
    OUTCOME_DIR_ENV,
    OUTCOME_FILE,
    Terminated,
    TrainConfigError,
    outcome_of,
    raise_terminated,
    read_outcome,
    report_outcome,
)
from trainer_bridge.parallel.device import MULTI_NODE_ENV, STORE_ENDPOINT_ENV, init_runtime, shutdown
from trainer_bridge.torchrun import die_with_parent

LOOPBACK = "127.0.0.1"
PREFIX = "corpusmill train: "
START_PLAN_FILE = "start_plan.json"  # in the launcher's outcome directory: its plan, read by the workers


class TrainInterrupted(KeyboardInterrupt):
    """Training was interrupted (SIGINT or SIGTERM) and its line was said; ``code`` is the exit code."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


@dataclass
class Rendezvous:
    """torchrun options passed through for multi-node jobs (see ``torchrun --help``)."""

    nnodes: str = "1"
    node_rank: int | None = None
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    max_restarts: int = 0
    nproc_per_node: int | None = None
    rdzv_conf: str | None = None  # KEY=VALUE,... for torchrun's --rdzv-conf (c10d timeouts), over the defaults

    @property
    def multi_node(self) -> bool:
        return self.nnodes != "1" or self.rdzv_endpoint is not None

    @property
    def elastic(self) -> bool:
        """``--nnodes MIN:MAX``: the job goes on with between MIN and MAX nodes."""
        return ":" in self.nnodes

    @property
    def node_range(self) -> tuple[int, int]:
        low, _, high = self.nnodes.partition(":")
        return int(low), int(high or low)

    @property
    def uses_corpusmill_store(self) -> bool:
        """Whether the job's store is the launcher's (single node, or multi-node with the c10d backend); other
        backends (torchrun's default ``static``) keep torchrun's own store."""
        return not self.multi_node or (self.rdzv_backend == "c10d" and self.rdzv_endpoint is not None)


def split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--rdzv-endpoint {endpoint!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


class HostedStore:
    """The job's TCPStore, listening only on ``host`` (the socket is bound here, then handed to the store)."""

    def __init__(self, host: str, port: int):
        import torch.distributed as dist

        last_error: OSError | None = None
        sock = None
        for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            candidate = socket.socket(family, kind, proto)
            try:
                candidate.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                candidate.bind(address)
                candidate.listen(4096)
            except OSError as error:
                candidate.close()
                last_error = error
                continue
            sock = candidate
            break
        if sock is None:
            raise last_error or OSError(errno.EADDRNOTAVAIL, f"cannot bind {host}:{port}")
        bound_host, bound_port = sock.getsockname()[:2]
        self.endpoint = f"[{bound_host}]:{bound_port}" if ":" in bound_host else f"{bound_host}:{bound_port}"
        self.port = bound_port
        # The store owns the listening socket from here on (and closes it).
        self.store = dist.TCPStore(bound_host, bound_port, is_master=True, master_listen_fd=sock.detach(),
                                   multi_tenant=True, wait_for_workers=False, use_libuv=True)

    def close(self) -> None:
        self.store = None


def host_store(rdzv: Rendezvous) -> HostedStore | None:
    """The store this launcher hosts: on 127.0.0.1 for a single node; for a multi-node c10d job, on the
    endpoint's address when it is one of this machine's (else another node's launcher hosts it: None)."""
    if not rdzv.multi_node:
        return HostedStore(LOOPBACK, 0)
    host, port = split_endpoint(rdzv.rdzv_endpoint)
    try:
        return HostedStore(host, port)
    except OSError as error:
        if error.errno in (errno.EADDRNOTAVAIL, errno.EINVAL):
            return None  # not an address of this machine
        if error.errno == errno.EADDRINUSE:
            # Another launcher of this job on this machine hosts it (several nodes' agents on one host, as in
            # the tests); anything else listening there fails the rendezvous with torchrun's own message.
            print(f"{PREFIX}the store at {rdzv.rdzv_endpoint} is hosted by another process on this machine; "
                  "joining it", flush=True)
            return None
        raise


# torchrun's c10d rendezvous for an elastic job: a lost node is noticed within keep_alive_interval ×
# keep_alive_max_attempt seconds, and a rendezvous that has MIN nodes closes after last_call_timeout (torch's
# defaults, 5 × 3 and 30 s, made the survivor of a lost node wait 49 s; these about 7 s: ENVIRONMENT.md).
# ``--rdzv-conf`` overrides any of them (join_timeout, close_timeout, heartbeat, ...).
ELASTIC_RDZV_CONF = {"last_call_timeout": "2", "keep_alive_interval": "1", "keep_alive_max_attempt": "3"}


def rdzv_conf(rdzv: Rendezvous) -> str:
    """The ``--rdzv-conf`` value for a job on the launcher's store: is_host=false (torchrun only connects),
    the elastic defaults for ``--nnodes MIN:MAX``, then the user's ``--rdzv-conf`` pairs."""
    conf = {"is_host": "false", **(ELASTIC_RDZV_CONF if rdzv.elastic else {})}
    for pair in filter(None, (rdzv.rdzv_conf or "").split(",")):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--rdzv-conf {rdzv.rdzv_conf!r}: expected KEY=VALUE[,KEY=VALUE...]")
        if key.strip() == "is_host":
            raise ValueError("--rdzv-conf is_host: the launcher hosts the store; torchrun must not")
        conf[key.strip()] = value.strip()
    return ",".join(f"{k}={v}" for k, v in conf.items())


def torchrun_command(config_file: Path, run_dir: Path, world_size: int, rdzv: Rendezvous,
                     store_endpoint: str | None = None, *, shards_verified: bool = False,
                     start_plan: Path | None = None) -> list[str]:
    """The torchrun command line. ``store_endpoint``: the job's store hosted by corpusmill (required for a
    single node: torchrun then only connects to it and opens no listening socket of its own). ``start_plan``:
    the file of the launcher's start plan, for the workers."""
    nnodes_max = rdzv.node_range[1]
    nproc = rdzv.nproc_per_node or max(1, world_size // nnodes_max)
    command = [sys.executable, "-m", "trainer_bridge.torchrun", f"--nnodes={rdzv.nnodes}",
               f"--nproc-per-node={nproc}", f"--max-restarts={rdzv.max_restarts}"]
    if rdzv.uses_corpusmill_store:
        if store_endpoint is None:
            raise ValueError("a single-node or c10d job needs the endpoint of the store corpusmill hosts")
        command += ["--rdzv-backend=c10d", f"--rdzv-endpoint={store_endpoint}",
                    # every node of a job must name the same id: torchrun's default 'none' unless one is given
                    f"--rdzv-id={rdzv.rdzv_id or ('none' if rdzv.multi_node else uuid.uuid4().hex)}",
                    f"--rdzv-conf={rdzv_conf(rdzv)}"]
        if not rdzv.multi_node:
            command.append(f"--local-addr={LOOPBACK}")
        if rdzv.node_rank is not None:
            command.append(f"--node-rank={rdzv.node_rank}")
    else:
        for flag, value in (("--node-rank", rdzv.node_rank), ("--rdzv-backend", rdzv.rdzv_backend),
                            ("--rdzv-endpoint", rdzv.rdzv_endpoint), ("--rdzv-id", rdzv.rdzv_id)):
            if value is not None:
                command.append(f"{flag}={value}")
        if rdzv.rdzv_conf:
            command.append(f"--rdzv-conf={rdzv.rdzv_conf}")
    return command + ["-m", "trainer_bridge.launch", *(["--shards-verified"] if shards_verified else []),
                      *(["--start-plan", str(start_plan)] if start_plan is not None else []),
                      "--train-config", str(config_file), "--run-dir", str(run_dir)]


def loopback_interface() -> str | None:
    try:
        names = {name for _, name in socket.if_nameindex()}
    except OSError:
        return None
    return next((n for n in ("lo", "lo0") if n in names), None)


def torchrun_env(rdzv: Rendezvous, store_endpoint: str | None, outcome_dir: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), OUTCOME_DIR_ENV: outcome_dir}
    if rdzv.uses_corpusmill_store and store_endpoint is not None:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"  # the agent opens no store of its own for the workers
        env[STORE_ENDPOINT_ENV] = store_endpoint
    if rdzv.multi_node:
        env[MULTI_NODE_ENV] = "1"
    if rdzv.elastic:
        env[ELASTIC_ENV] = "1"
    if not rdzv.multi_node:
        loopback = loopback_interface()
        if loopback is not None:
            env.setdefault("GLOO_SOCKET_IFNAME", loopback)
            env.setdefault("NCCL_SOCKET_IFNAME", loopback)
    return env


# ------------------------------------------------------------------------------------------------- checks

def _check_writable(paths: RunPaths) -> None:
    """Raise PermissionError (errno, the directory named) unless the training outputs can be written."""
    for directory in (paths.train, paths.checkpoints):
        if directory == paths.checkpoints and not directory.exists():
            continue
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-probe-"):
                pass
        except OSError as error:
            raise type(error)(error.errno, error.strerror, str(directory)) from None


def preflight(train_cfg: TrainConfig, paths: RunPaths, *, from_scratch: bool = False,
              say: Callable[[str], None] = lambda line: print(PREFIX + line, flush=True)) -> StartPlan:
    """Everything that can refuse a run, checked once before any rank starts (raises what
    ``outcomes.outcome_of`` maps to an exit code), and the run's start plan (``checkpoint.start.plan_start``),
    returned for the ranks; then writes the train config for the ranks (a refused run leaves the previous one in
    place: ``corpusmill export`` of an older checkpoint may read it). With ``from_scratch`` the run's checkpoints
    and training logs are set aside (``checkpoint.store.set_aside``)."""
    if not paths.shards.exists():  # a run not prepared, or a misspelt name: said before train/ is made
        raise TrainConfigError(f"no shards to train on: {paths.shards} does not exist (check the config's `name`; "
                               f"`corpusmill run CONFIG` or `corpusmill prepare CONFIG` builds them)")
    _check_writable(paths)
    plan = _plan(train_cfg, paths, from_scratch=from_scratch, say=say)
    write_json(paths.train_config, train_cfg.model_dump(mode="json"))
    return plan


def _plan(train_cfg: TrainConfig, paths: RunPaths, *, from_scratch: bool, say: Callable[[str], None]) -> StartPlan:
    """The shards checked as ``train.verify_shards`` asks (once for every rank), then the start plan against
    the identity they and the resolved model config give."""
    tokenizer_sha256 = expected_tokenizer_sha256(paths)
    verify = train_cfg.verify_shards
    source = open_split(paths.shards, "train", tokenizer_sha256, verify=verify)
    if train_cfg.eval.interval > 0 and has_split(paths.shards, "val"):
        open_split(paths.shards, "val", tokenizer_sha256, verify=verify)
    if verify == "manifest":
        say("shards: sizes and row counts checked against the manifest, checksums not verified "
            "(train.verify_shards: manifest)")
    identity = run_identity(resolve_model_config(train_cfg, source), paths)
    return plan_start(train_cfg, paths, identity, from_scratch=from_scratch, say=say)


def interrupted_line(paths: RunPaths, code: int) -> str:
    latest = latest_checkpoint(paths.checkpoints)
    what = "interrupted" if code == ExitCode.INTERRUPTED else "terminated"
    if latest is None:
        return f"{PREFIX}{what}; no checkpoint was written yet (the next run starts from step 0)"
    return f"{PREFIX}{what}; the last checkpoint, {latest.name}, is kept: run the same command to resume"


# ------------------------------------------------------------------------------------------------ running

def say_outcome(message: str) -> None:
    """How ``corpusmill train`` ends an expected failure: its one line, on stderr."""
    print(PREFIX + message, file=sys.stderr, flush=True)


def run_training(cfg, rendezvous: Rendezvous | None = None, *, from_scratch: bool = False,
                 outcome: Callable[[str], None] = say_outcome) -> int:
    """Train run ``cfg`` (a ``pipelines.config.RunConfig``, or anything with ``.run_dir`` and ``.train``);
    returns an exit code (``trainer_bridge.outcomes``), or raises ``TrainInterrupted`` after saying so in one
    line. Shards come from ``RunPaths.shards``; outputs go to ``RunPaths.train``. An expected failure's one line
    (without the command's prefix) goes to ``outcome``: by default printed, as ``corpusmill train`` ends;
    ``corpusmill run`` takes it into its own line naming the stage."""
    rdzv = rendezvous or Rendezvous()
    paths = RunPaths(cfg.run_dir)
    train_cfg: TrainConfig = cfg.train
    try:
        check_world_sizes(train_cfg, rdzv)
        plan = preflight(train_cfg, paths, from_scratch=from_scratch)
    except Exception as error:  # noqa: BLE001 - expected failures end in one line, the rest keeps its traceback
        found = outcome_of(error)
        if found is None:
            raise
        outcome(found[1])
        return found[0]
    world = planned_world_size(train_cfg, rdzv)
    if world == 1 and not rdzv.multi_node and rdzv.max_restarts == 0:
        return train_in_process(train_cfg, paths, shards_verified=True, outcome=outcome, plan=plan)
    return _run_torchrun(train_cfg, paths, rdzv, world, plan, outcome)


def planned_world_size(train_cfg: TrainConfig, rdzv: Rendezvous) -> int:
    """The processes of the whole job at its largest: the mesh's; with ``mesh.dp: auto``, --nproc-per-node (by
    default pp·tp: one data-parallel replica per node) on each of the MAX nodes."""
    if not train_cfg.mesh.auto_dp:
        return train_cfg.mesh.world_size
    return (rdzv.nproc_per_node or train_cfg.mesh.world_size) * rdzv.node_range[1]


def check_world_sizes(train_cfg: TrainConfig, rdzv: Rendezvous) -> None:
    """An elastic job (``--nnodes MIN:MAX``) needs ``mesh.dp: auto``, and every world size it may shrink or
    grow to must fit the mesh and the batch: refused here, before anything starts (``TrainConfigError``)."""
    try:
        low, high = rdzv.node_range
    except ValueError:
        raise TrainConfigError(f"--nnodes {rdzv.nnodes!r}: expected N or MIN:MAX") from None
    if not 1 <= low <= high:
        raise TrainConfigError(f"--nnodes {rdzv.nnodes!r}: expected 1 <= MIN <= MAX")
    if rdzv.elastic and not train_cfg.mesh.auto_dp:
        raise TrainConfigError(f"train.mesh.dp: --nnodes {rdzv.nnodes} (elastic) needs mesh.dp: auto (data-parallel "
                               f"ranks = the processes of each restart / (pp × tp)), not a fixed {train_cfg.mesh.dp}")
    if rdzv.rdzv_conf is not None:
        try:
            rdzv_conf(rdzv)
        except ValueError as error:
            raise TrainConfigError(str(error)) from None
    if train_cfg.mesh.auto_dp:
        per_node = rdzv.nproc_per_node or train_cfg.mesh.world_size
        for nodes in range(low, high + 1):
            train_cfg.for_world_size(per_node * nodes)


def _run_torchrun(train_cfg: TrainConfig, paths: RunPaths, rdzv: Rendezvous, world: int, plan: StartPlan,
                  say: Callable[[str], None] = say_outcome) -> int:
    store = host_store(rdzv) if rdzv.uses_corpusmill_store else None
    endpoint = store.endpoint if store is not None else rdzv.rdzv_endpoint if rdzv.uses_corpusmill_store else None
    with tempfile.TemporaryDirectory(prefix="corpusmill-train-") as outcome_dir:
        plan_file = Path(outcome_dir) / START_PLAN_FILE
        plan_file.write_text(plan.to_json(), encoding="utf-8")
        command = torchrun_command(paths.train_config, paths.root, world, rdzv, endpoint, shards_verified=True,
                                   start_plan=plan_file)
        print(PREFIX + " ".join(command), flush=True)
        job = TorchrunJob(command, torchrun_env(rdzv, endpoint, outcome_dir), Path(outcome_dir) / OUTCOME_FILE)
        code = job.run()
        outcome = read_outcome(outcome_dir)
    if store is not None:
        store.close()
    if job.interrupted is not None:
        print(interrupted_line(paths, job.interrupted), file=sys.stderr, flush=True)
        raise TrainInterrupted(job.interrupted)
    if outcome is not None:
        say(outcome[1])
        return outcome[0]
    return code


class TorchrunJob:
    """torchrun in a session of its own, its output passed through line by line until the job is being
    stopped (an interrupt, or a rank's outcome file), then dropped."""

    def __init__(self, command: list[str], env: dict[str, str], outcome_file: Path):
        self.command, self.env, self.outcome_file = command, env, outcome_file
        self.muted = threading.Event()
        self.interrupted: int | None = None
        self.process: subprocess.Popen | None = None

    def _pump(self, source: IO[bytes], sink: IO[str], *, errors: bool) -> None:
        """Copy lines until muted; the error stream also stops as soon as a rank's outcome exists (what follows
        on it is the other ranks' tracebacks and torchrun's failure report)."""
        out = getattr(sink, "buffer", None)
        for line in iter(source.readline, b""):
            if self.muted.is_set() or (errors and self.outcome_file.exists()):
                continue
            try:
                if out is not None:
                    sink.flush()
                    out.write(line)
                    out.flush()
                else:
                    sink.write(line.decode("utf-8", errors="replace"))
                    sink.flush()
            except (OSError, ValueError):  # our own output is gone (a closed pipe): keep draining
                pass
        source.close()

    def _on_signal(self, signum, _frame) -> None:
        process = self.process
        if self.interrupted is not None:  # the second time: at once
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            return
        self.interrupted = ExitCode.INTERRUPTED if signum == signal.SIGINT else ExitCode.TERMINATED
        self.muted.set()
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # torchrun passes it to every worker, which exits at once

    def run(self) -> int:
        in_main_thread = threading.current_thread() is threading.main_thread()
        previous = {}
        if in_main_thread:
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            self.process = process = subprocess.Popen(
                self.command, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True)
            if self.interrupted is not None:  # interrupted while starting
                process.send_signal(signal.SIGINT)
            pumps = [threading.Thread(target=self._pump, args=(process.stdout, sys.stdout),
                                      kwargs={"errors": False}, daemon=True),
                     threading.Thread(target=self._pump, args=(process.stderr, sys.stderr),
                                      kwargs={"errors": True}, daemon=True)]
            for pump in pumps:
                pump.start()
            stopping = False
            while True:
                try:
                    code = process.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    if not stopping and self.outcome_file.exists():
                        # A rank gave its verdict (deterministic: a restart would only repeat it): stop the job.
                        stopping = True
                        self.muted.set()
                        process.send_signal(signal.SIGTERM)
            for pump in pumps:
                pump.join(timeout=10)
            return code
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


# A directory: every rank appends the sample ids of each step it completes to ``samples-<pid>.jsonl`` there
# (step, rank, world size, ids). For tests and audits of a run's data ("every sample exactly once" across
# restarts and elastic world-size changes); unset in normal runs.
SAMPLE_LOG_ENV = "CORPUSMILL_TRAIN_SAMPLE_LOG"


def sample_log_hooks():
    """``TrainHooks`` writing the ``SAMPLE_LOG_ENV`` log, or None when it is not set."""
    directory = os.environ.get(SAMPLE_LOG_ENV)
    if not directory:
        return None
    Path(directory).mkdir(parents=True, exist_ok=True)
    log = Path(directory) / f"samples-{os.getpid()}.jsonl"
    pending: dict[int, list[int]] = {}
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))

    def on_step(step: int, _record: dict) -> None:
        line = {"step": step, "rank": rank, "world": world, "pid": os.getpid(), "time": time.time(),
                "sample_ids": pending.pop(step, [])}
        with log.open("a") as out:
            out.write(json.dumps(line) + "\n")

    return TrainHooks(on_batch=lambda step, ids: pending.__setitem__(step, list(ids)), on_step=on_step)


@contextmanager
def sigterm_raises():
    """While training in this process: SIGTERM raises ``outcomes.Terminated`` (a ``KeyboardInterrupt``), so
    that it ends as a Ctrl-C does (a save in progress finished, one line naming the checkpoint kept, exit 143)
    rather than killing the process without a word. Only where SIGTERM still has its default action, in the main
    thread: a handler already installed (a torchrun worker's quiet exit, ``_exit_quietly``; an embedding
    program's own) is left as it is."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def train_in_process(train_cfg: TrainConfig, paths: RunPaths, *, shards_verified: bool = False,
                     outcome: Callable[[str], None] = say_outcome, plan: StartPlan | None = None) -> int:
    """Train in this process, starting as ``plan`` says (the launcher's). Alone, an expected failure is said in
    one line (to ``outcome``); as a torchrun worker it is left for the launcher (``outcomes.report_outcome``)."""
    runtime = init_runtime(train_cfg.device, train_cfg.collective_timeout_s, train_cfg.connect_timeout_s)
    try:
        with sigterm_raises():
            result = train(train_cfg, paths, shards_verified=shards_verified, hooks=sample_log_hooks(), plan=plan)
    except KeyboardInterrupt as interrupt:  # Ctrl-C, or SIGTERM (outcomes.Terminated)
        code = ExitCode.TERMINATED if isinstance(interrupt, Terminated) else ExitCode.INTERRUPTED
        print(interrupted_line(paths, code), file=sys.stderr, flush=True)
        raise TrainInterrupted(code) from None
    except Exception as error:  # noqa: BLE001 - expected failures end in one line, the rest keeps its traceback
        found = outcome_of(error)
        if found is None:
            raise
        code, message = found
        if not report_outcome(code, message):
            outcome(message)
        return code
    finally:
        shutdown(runtime)
    if runtime.is_main:
        final = result.losses.get(result.final_step - 1)
        print(f"{PREFIX}done: {result.final_step}/{train_cfg.steps} steps completed (last step "
              f"{result.final_step - 1})" + (f", loss {final:.4f}" if final is not None else "")
              + f"; metrics in {paths.metrics_jsonl}", flush=True)
    return 0


def _exit_quietly(signum, _frame) -> None:
    """A worker asked to stop (torchrun passes on the launcher's SIGINT, or stops the group with SIGTERM): end
    now, without a traceback. Checkpoints are atomic: the last complete one is intact; a save cut short is a
    ``.partial`` directory, removed at the next start."""
    os._exit(ExitCode.INTERRUPTED if signum == signal.SIGINT else ExitCode.TERMINATED)


def main(argv: list[str] | None = None) -> int:
    """torchrun worker entry point."""
    # before anything logs: the launcher's format and filters (no "WARNING:root:" lines, no Beam import noise when
    # per-domain validation reads the docs), loud only with -v (CORPUSMILL_VERBOSE, inherited)
    quiet_logging()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _exit_quietly)
    die_with_parent()  # torchrun killed outright: do not train on as an orphan
    parser = argparse.ArgumentParser(description="corpusmill trainer worker (started by torchrun)")
    parser.add_argument("--train-config", required=True, type=Path)
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--shards-verified", action="store_true",
                        help="the launcher has checked the shards as train.verify_shards asks")
    parser.add_argument("--start-plan", type=Path, help="the launcher's start plan (checkpoint.start.StartPlan)")
    args = parser.parse_args(argv)
    train_cfg = TrainConfig.model_validate_json(args.train_config.read_text())
    plan = StartPlan.from_json(args.start_plan.read_text(encoding="utf-8")) if args.start_plan else None
    return train_in_process(train_cfg, RunPaths(args.run_dir), shards_verified=args.shards_verified, plan=plan)


if __name__ == "__main__":
    sys.exit(main())
