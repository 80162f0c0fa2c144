"""A real single-node Slurm for tests: Debian's ``munged``, ``slurmctld`` and ``slurmd`` (``make test`` installs
``slurm-wlm`` and ``munge``), started as root in the foreground, each with its own files under one folder.

Nothing is shared with a Slurm the machine may already run: the munge key and socket, the ports, the state and
spool folders and the logs are the test's own, and ``SLURM_CONF`` points Slurm's commands (``sbatch``,
``squeue``, ``scancel``; dask-jobqueue calls them) at this instance. Without systemd or cgroups: processes are
tracked by ``proctrack/linuxproc``, tasks by ``task/none``. A daemon that does not start fails the test with
the end of its log.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
NODE = "localhost"
PARTITION = "debug"


class SlurmDidNotStart(RuntimeError):
    pass


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def node_memory_mb() -> int:
    """What the node offers jobs: its memory less 1 GiB (slurmd drains a node that has less than configured)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    return max(1024, total - 1024)


def slurm_conf(root: Path, munge_socket: Path, cpus: int, memory_mb: int) -> str:
    ctld_port, slurmd_port = _free_ports(2)
    return "\n".join([
        "ClusterName=corpusmilltest",
        f"SlurmctldHost={NODE}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "SchedulerType=sched/backfill",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


class SingleNodeSlurm:
    """``start()`` the three daemons under ``root`` and wait until the node is idle; ``stop()`` cancels every job
    and stops them. ``env`` is the environment Slurm's commands need (``SLURM_CONF``)."""

    def __init__(self, root: Path, cpus: int = 2):
        self.root, self.cpus = Path(root), cpus
        self.processes: dict[str, subprocess.Popen] = {}
        self.conf = self.root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def log_tails(self, lines: int = 15) -> str:
        out = []
        for path in sorted((self.root / "log").glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name} (last {len(tail)} lines)\n" + "\n".join(tail))
        for name, process in self.processes.items():
            if process.poll() is not None:
                out.append(f"--- {name} exited with {process.returncode}")
        return "\n".join(out)

    def _fail(self, what: str) -> None:
        raise SlurmDidNotStart(f"single-node Slurm: {what}\n{self.log_tails()}")

    def start(self, timeout: float = 30) -> "SingleNodeSlurm":
        missing = [d for d in DAEMONS + ("sbatch", "squeue", "scancel", "sinfo") if shutil.which(d) is None]
        if missing:
            raise SlurmDidNotStart(f"not installed: {', '.join(missing)} (apt-get install slurm-wlm munge, as "
                                   f"`make system-tools` does as root)")
        if os.geteuid() != 0:
            raise SlurmDidNotStart("the test's Slurm daemons run as root (SlurmUser=root); run the test as root")
        munge = self.root / "munge"
        for folder in (munge, self.root / "state", self.root / "spool", self.root / "log"):
            folder.mkdir(parents=True, exist_ok=True)
        munge.chmod(0o755)  # clients must reach the socket; the key is 0600
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        munge_socket = munge / "munge.socket"
        self.conf.write_text(slurm_conf(self.root, munge_socket, self.cpus, node_memory_mb()))
        log = self.root / "log"
        self._spawn("munged", ["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={munge_socket}",
                               f"--pid-file={munge / 'munged.pid'}", f"--seed-file={munge / 'munged.seed'}",
                               f"--log-file={log / 'munged.log'}"])
        self._wait(lambda: munge_socket.exists(), timeout, "munged made no socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-N", NODE, "-f", str(self.conf)])
        self._wait(self._node_idle, timeout, "the node did not become idle")
        return self

    def _spawn(self, name: str, command: list[str]) -> None:
        # stdout/stderr to a file: the daemons also log there before their log file is open
        with open(self.root / "log" / f"{name}.console.log", "wb") as console:
            self.processes[name] = subprocess.Popen(command, stdout=console, stderr=subprocess.STDOUT,
                                                    env=self.env, start_new_session=True)

    def _wait(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if any(p.poll() is not None for p in self.processes.values()):
                self._fail(what + " (a daemon exited)")
            if time.monotonic() > deadline:
                self._fail(f"{what} within {timeout:g} s")
            time.sleep(0.2)

    def _node_idle(self) -> bool:
        state = self.run("sinfo", "--noheader", "--nodes", NODE, "--format", "%T", check=False)
        return state.returncode == 0 and state.stdout.strip() == "idle"

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(command), env=self.env, capture_output=True, text=True, timeout=30, check=check)

    def job_ids(self) -> list[str]:
        """Ids of the jobs in the queue (pending or running)."""
        return self.run("squeue", "--noheader", "--format", "%i").stdout.split()

    def stop(self) -> None:
        try:
            if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
                ids = self.job_ids()
                if ids:
                    self.run("scancel", *ids, check=False)
                    deadline = time.monotonic() + 15
                    while self.job_ids() and time.monotonic() < deadline:
                        time.sleep(0.2)
        finally:
            for name in reversed(list(self.processes)):  # slurmd, slurmctld, munged
                process = self.processes[name]
                if process.poll() is None:
                    process.terminate()
                    try:
                        process.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait()
