"""The one place that names a device type or a communication backend.

Everything else asks this module: which device, which backend, whether to use flex attention, how to read
peak memory, how many FLOP/s the device can do. The same trainer then runs on CPU (gloo) and CUDA (nccl).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

# Dense peak FLOP/s per device, by (name substring, dtype). Sources: vendor data sheets (dense, no sparsity).
_CUDA_PEAK_FLOPS = {
    "H200": {"bf16": 989e12, "fp16": 989e12, "fp32": 494e12},  # SXM; fp32 = TF32 tensor cores
    "H100": {"bf16": 989e12, "fp16": 989e12, "fp32": 494e12},
    "A100": {"bf16": 312e12, "fp16": 312e12, "fp32": 156e12},
    "L40S": {"bf16": 362e12, "fp16": 362e12, "fp32": 183e12},
    "A10": {"bf16": 125e12, "fp16": 125e12, "fp32": 62.5e12},
}


@dataclass(frozen=True)
class Runtime:
    """Who this process is and what it runs on."""

    device: torch.device
    backend: str | None  # None when not distributed
    rank: int
    world_size: int
    local_rank: int

    @property
    def distributed(self) -> bool:
        return self.backend is not None

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce(self, tensor: torch.Tensor, group=None, op=dist.ReduceOp.SUM) -> torch.Tensor:
        """In place across the ranks of ``group`` (all ranks by default); alone, the tensor as it is."""
        if self.distributed:
            dist.all_reduce(tensor, op=op, group=group)
        return tensor


def resolve_device_type(requested: str) -> str:
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device: 'cuda' was configured but no CUDA device is available (allowed: auto, cpu, cuda)")
    if requested not in ("cpu", "cuda"):
        raise ValueError(f"device: {requested!r} is not one of 'auto', 'cpu', 'cuda'")
    return requested


def init_runtime(requested: str, collective_timeout_s: float = 600.0, connect_timeout_s: float = 300.0) -> Runtime:
    """Initialize the process group when launched by torchrun (WORLD_SIZE > 1); otherwise run alone."""
    device_type = resolve_device_type(requested)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    backend = None
    if world_size > 1:
        backend = "nccl" if device_type == "cuda" else "gloo"
        if not dist.is_initialized():
            store = group_store(rank, world_size, connect_timeout_s)
            store.set_timeout(timedelta(seconds=collective_timeout_s))
            dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size,
                                    timeout=timedelta(seconds=collective_timeout_s),
                                    device_id=device if device_type == "cuda" else None)
    return Runtime(device=device, backend=backend, rank=rank, world_size=world_size, local_rank=local_rank)


def incarnation() -> str:
    """Names this start of the worker group: torchrun's restart count and the world size.

    torchrun keeps one TCPStore (its agent's) for the whole job and hands every restarted group the same
    MASTER_ADDR:MASTER_PORT, and torch no longer prefixes the keys per attempt. Gloo's full-mesh connect
    publishes each rank's listening address under a fixed key and reads its peers' keys, so without a
    namespace of its own a restarted rank that is faster than its peer reads the address of the dead
    process and fails with ``connectFullMesh ... Connection refused``."""
    return f"restart{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}-world{os.environ.get('WORLD_SIZE', '1')}"


def group_store(rank: int, world_size: int, connect_timeout_s: float) -> dist.Store:
    """The rendezvous store (torchrun's agent store, or rank 0's for a plain ``env://`` launch), in a key
    namespace of this incarnation, once every rank of it has arrived.

    Waiting for all ranks here (up to ``connect_timeout_s``) separates "a restarted peer is slow to start"
    (a loaded machine, a cold import) from "a collective hangs" (``collective_timeout_s``)."""
    timeout = timedelta(seconds=connect_timeout_s)
    store, _, _ = next(dist.rendezvous("env://", rank=rank, world_size=world_size, timeout=timeout))
    store = dist.PrefixStore(f"corpusmill/{incarnation()}", store)
    store.set_timeout(timeout)
    if store.add("ranks_arrived", 1) == world_size:
        store.set("all_arrived", b"1")
    try:
        store.wait(["all_arrived"], timeout)
    except RuntimeError as error:  # DistStoreError (a RuntimeError): a rank did not start in time
        arrived = store.add("ranks_arrived", 0)
        raise RuntimeError(f"rank {rank}: {arrived} of {world_size} ranks arrived within connect_timeout_s "
                           f"({connect_timeout_s:g} s); a rank failed to start or the machine is overloaded") from error
    return store


def shutdown(runtime: Runtime) -> None:
    if runtime.distributed and dist.is_initialized():
        dist.destroy_process_group()


def side_channel_backend() -> str:
    """Backend for the background checkpoint group: always gloo (CPU staging), on CPU and CUDA alike."""
    return "gloo"


def use_flex_attention(runtime_device: torch.device, configured: str) -> bool:
    """flex_attention has no backward on CPU (ENVIRONMENT.md): flex only on CUDA."""
    if configured == "flex" and runtime_device.type != "cuda":
        raise ValueError("attention: 'flex' needs a CUDA device (flex_attention has no CPU backward); use 'sdpa'")
    return configured == "flex" or (configured == "auto" and runtime_device.type == "cuda")


def autocast_device_type(device: torch.device) -> str:
    return device.type


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_bytes(device: torch.device) -> int:
    """Peak allocated accelerator memory; on CPU the process's peak resident set size."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def rng_states(device: torch.device) -> dict[str, torch.Tensor]:
    states = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def set_rng_states(device: torch.device, states: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(states["cpu"].cpu())
    if device.type == "cuda" and "cuda" in states:
        torch.cuda.set_rng_state(states["cuda"].cpu(), device)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def peak_flops(device: torch.device, dtype_name: str, configured: float | None) -> tuple[float, str]:
    """Peak FLOP/s of one device and where the number came from ('configured', 'table', 'measured')."""
    if configured is not None:
        return configured, "configured"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, table in _CUDA_PEAK_FLOPS.items():
            if key in name:
                return table[dtype_name], "table"
    return _measure_matmul_flops(device), "measured"


def _measure_matmul_flops(device: torch.device, size: int = 512, repeats: int = 8) -> float:
    """Best observed fp32 matmul FLOP/s on this device with the current thread count: an achievable peak."""
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    a @ b  # warm-up
    synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best
