"""The one place that names a device type or a communication backend.

Everything else asks this module: which device, which backend, whether to use flex attention, how to read
peak memory, how many FLOP/s the device can do. The device comes from ``torch.accelerator`` (the vendor-neutral
API: CUDA and ROCm, Intel XPU, Apple MPS, out-of-tree PrivateUse1 plug-ins such as Ascend's ``npu``) and the
communication backend from ``dist.get_default_backend_for_device`` (gloo on CPU, nccl/rccl on CUDA/ROCm,
xccl on XPU, hccl on NPU). The same trainer then runs on CPU and on any accelerator torch knows.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

# Dense peak FLOP/s per device (no sparsity), keyed by a substring of the device name as the runtime reports it
# (``torch.cuda.get_device_name`` on CUDA and ROCm, ``torch.npu.get_device_name`` on Ascend), compared without
# case and spaces; the longest matching key wins ("H100 PCIe" before "H100"). Sources: vendor data sheets.
# NVIDIA fp32 = TF32 tensor cores (what fp32 matmuls use with TF32 enabled); AMD fp32 = FP32 matrix.
# ``metrics.peak_flops`` overrides the table (other bins, clocks, or a different convention).
PEAK_FLOPS_TABLE: dict[str, dict[str, float]] = {
    "B200": {"bf16": 2250e12, "fp16": 2250e12, "fp32": 1100e12},     # HGX B200 data sheet, per GPU, dense
    "H200 NVL": {"bf16": 835e12, "fp16": 835e12, "fp32": 418e12},
    "H200": {"bf16": 989e12, "fp16": 989e12, "fp32": 494e12},        # SXM
    "H100 NVL": {"bf16": 835e12, "fp16": 835e12, "fp32": 418e12},
    "H100 PCIe": {"bf16": 756e12, "fp16": 756e12, "fp32": 378e12},
    "H100": {"bf16": 989e12, "fp16": 989e12, "fp32": 494e12},        # SXM ("H100 80GB HBM3")
    "A100": {"bf16": 312e12, "fp16": 312e12, "fp32": 156e12},        # SXM and PCIe
    "L40S": {"bf16": 362e12, "fp16": 362e12, "fp32": 183e12},
    "A10": {"bf16": 125e12, "fp16": 125e12, "fp32": 62.5e12},
    "MI300X": {"bf16": 1307.4e12, "fp16": 1307.4e12, "fp32": 163.4e12},  # AMD Instinct MI300X data sheet
    "Ascend910B": {"bf16": 313e12, "fp16": 313e12},  # approximate (bins 910B1-B4 differ): set metrics.peak_flops
}


def _normalized(name: str) -> str:
    return name.lower().replace(" ", "").replace("-", "")


def table_peak_flops(name: str, dtype_name: str) -> float | None:
    """The table's figure for a device name and compute dtype, or None (unknown device or dtype)."""
    matches = [key for key in PEAK_FLOPS_TABLE if _normalized(key) in _normalized(name)]
    if not matches:
        return None
    return PEAK_FLOPS_TABLE[max(matches, key=len)].get(dtype_name)


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
    def is_accelerator(self) -> bool:
        return self.device.type != "cpu"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce(self, tensor: torch.Tensor, group=None, op=dist.ReduceOp.SUM) -> torch.Tensor:
        """In place across the ranks of ``group`` (all ranks by default); alone, the tensor as it is."""
        if self.distributed:
            dist.all_reduce(tensor, op=op, group=group)
        return tensor


def current_accelerator() -> torch.device | None:
    """The accelerator torch was built for and can use now (``torch.accelerator``), None on a CPU-only machine."""
    return torch.accelerator.current_accelerator(check_available=True)


def resolve_device_type(requested: str) -> str:
    """``auto``: the available accelerator, else cpu; ``cpu``; or a device type that must be the available
    accelerator's (cuda — also ROCm —, xpu, mps, npu, ...)."""
    accelerator = current_accelerator()
    if requested == "auto":
        return accelerator.type if accelerator is not None else "cpu"
    if requested == "cpu":
        return "cpu"
    if accelerator is None or accelerator.type != requested:
        found = accelerator.type if accelerator is not None else "none (CPU only)"
        allowed = ", ".join(["auto", "cpu"] + ([accelerator.type] if accelerator is not None else []))
        raise RuntimeError(f"device: {requested!r} was configured but the available accelerator is {found} "
                           f"(allowed here: {allowed})")
    return requested


def backend_for(device_type: str) -> str:
    """The default communication backend for a device type (gloo, nccl, xccl, hccl, ...)."""
    return dist.get_default_backend_for_device(device_type)


def init_runtime(requested: str, collective_timeout_s: float = 600.0, connect_timeout_s: float = 300.0) -> Runtime:
    """Initialize the process group when launched by torchrun (WORLD_SIZE > 1); otherwise run alone."""
    device_type = resolve_device_type(requested)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type != "cpu":
        torch.accelerator.set_device_index(local_rank)
        device = torch.device(device_type, local_rank)
    else:
        device = torch.device("cpu")
    backend = None
    if world_size > 1:
        backend = backend_for(device_type)
        if not dist.is_initialized():
            store = group_store(rank, world_size, connect_timeout_s)
            store.set_timeout(timedelta(seconds=collective_timeout_s))
            dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size,
                                    timeout=timedelta(seconds=collective_timeout_s),
                                    device_id=device if device_type != "cpu" else None)
    return Runtime(device=device, backend=backend, rank=rank, world_size=world_size, local_rank=local_rank)


def incarnation() -> str:
    """Names this start of the worker group: torchrun's restart count and the world size.

    torchrun keeps one TCPStore (its agent's) for the whole job and hands every restarted group the same
    MASTER_ADDR:MASTER_PORT, and torch no longer prefixes the keys per attempt. Gloo's full-mesh connect
    publishes each rank's listening address under a fixed key and reads its peers' keys, so without a
    namespace of its own a restarted rank that is faster than its peer reads the address of the dead
    process and fails with ``connectFullMesh ... Connection refused``."""
    world = os.environ.get('WORLD_SIZE', '1')
    if os.environ.get(MULTI_NODE_ENV) == "1":
        # Nodes count their restarts apart (a node that restarts after a peer's failure, or joins, has another
        # count than the one whose workers failed): the round's master address, chosen anew by every
        # rendezvous and the same on every node, names the start instead.
        return f"round-{os.environ.get('MASTER_ADDR', '')}-{os.environ.get('MASTER_PORT', '')}-world{world}"
    return f"restart{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}-world{world}"


# Set by ``corpusmill train`` for a multi-node job (``--nnodes`` other than 1, or a rendezvous endpoint).
MULTI_NODE_ENV = "CORPUSMILL_MULTI_NODE"


# HOST:PORT of the job's store, set by ``corpusmill train`` (trainer_bridge.launch), which hosts it bound to one
# address (loopback on a single node) and serves torchrun's rendezvous from it too; workers connect as clients.
STORE_ENDPOINT_ENV = "CORPUSMILL_STORE_ENDPOINT"


def group_store(rank: int, world_size: int, connect_timeout_s: float) -> dist.Store:
    """The rendezvous store (the launcher's, torchrun's agent store, or rank 0's for a plain ``env://``
    launch), in a key namespace of this incarnation, once every rank of it has arrived.

    Waiting for all ranks here (up to ``connect_timeout_s``) separates "a restarted peer is slow to start"
    (a loaded machine, a cold import) from "a collective hangs" (``collective_timeout_s``)."""
    timeout = timedelta(seconds=connect_timeout_s)
    endpoint = os.environ.get(STORE_ENDPOINT_ENV)
    if endpoint:
        host, port = endpoint.rsplit(":", 1)
        store = dist.TCPStore(host.strip("[]"), int(port), is_master=False, timeout=timeout)
    else:
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
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def reset_peak_memory(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.reset_peak_memory_stats(device.index)


def peak_memory_bytes(device: torch.device) -> int:
    """Peak allocated accelerator memory; on CPU the process's peak resident set size."""
    if device.type != "cpu":
        return int(torch.accelerator.max_memory_allocated(device.index))
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def _device_module(device: torch.device):
    return torch.get_device_module(device.type)


def rng_states(device: torch.device) -> dict[str, torch.Tensor]:
    """The CPU generator and the accelerator's (keyed by device type: 'cuda', 'xpu', 'npu', ...)."""
    states = {"cpu": torch.get_rng_state()}
    if device.type != "cpu":
        states[device.type] = _device_module(device).get_rng_state(device)
    return states


def set_rng_states(device: torch.device, states: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(states["cpu"].cpu())
    if device.type != "cpu" and device.type in states:
        _device_module(device).set_rng_state(states[device.type].cpu(), device)


def device_name(device: torch.device) -> str:
    """The accelerator's marketing name (e.g. 'NVIDIA H100 80GB HBM3', 'AMD Instinct MI300X', 'Ascend910B3');
    the device type when the backend has no name query (mps), 'cpu' on CPU."""
    if device.type == "cpu":
        return "cpu"
    get_name = getattr(_device_module(device), "get_device_name", None)
    return get_name(device) if get_name is not None else device.type


def peak_flops(device: torch.device, dtype_name: str, configured: float | None) -> tuple[float, str]:
    """Peak FLOP/s of one device and where the number came from ('configured', 'table', 'measured')."""
    if configured is not None:
        return configured, "configured"
    if device.type != "cpu":
        figure = table_peak_flops(device_name(device), dtype_name)
        if figure is not None:
            return figure, "table"
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
