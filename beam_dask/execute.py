"""Worker side of the Beam-on-Dask runner: the functions that Dask tasks call.

Every function here is a plain, importable function so that Dask can ship tasks that name it. A task is
deterministic given its inputs (the partition it reads, the side inputs it is given): that is what makes a
recomputation after a lost worker produce the same elements into the same shuffle buckets.

- ``run_stage``: one fused stage (a tree of ParDos, see ``translate.StagePlan``) over one input partition. It
  returns the elements of each materialised output, and logs this attempt's counter/distribution/gauge
  updates to the scheduler, where ``watch.JobWatch`` commits only the updates of the attempt whose result
  the scheduler kept (an attempt lost with its worker, or a recomputation of a key already done, never
  counts).
- ``split`` / ``group_pieces`` / ``concat_pieces``: the two sides of a shuffle
  (GroupByKey by a stable hash of the coder-encoded key; Reshuffle by deterministic round robin).
- ``end_job``: run by ``Client.run`` on every worker when a job ends: ``DoFn.teardown`` of pooled instances.

Every partition and shuffle bucket a task returns is a ``Packed``: its elements pickled a chunk at a time as
they are produced, decoded a chunk at a time by the reader (fresh objects for every reading). Dask moves it to
another worker, or spills it to disk, as those chunks, one frame each (``_serialize_chunks``).

DoFn instances are pooled per worker process and job: the first task of a transform on a worker unpickles
the DoFn and calls ``setup()`` once; later tasks of that transform on that worker reuse it (one instance per
concurrently running task, so with one thread per worker, exactly one per worker). Each pooled instance keeps
its ``DoFnRunner`` too (as Beam's own worker keeps a bundle processor for many bundles): building one inspects
every method of the DoFn, ~1 ms, which a shuffle-heavy job paid for every op of every task.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import pickle
import sys
import threading
import zlib
from typing import Any, Iterator

import distributed
from dask.sizeof import sizeof
from distributed.protocol import dask_deserialize, dask_serialize

from apache_beam.internal import pickler
from apache_beam.metrics.execution import MetricsContainer
from apache_beam.runners import common
from apache_beam.runners.worker import statesampler
from apache_beam.transforms import sideinputs
from apache_beam.transforms.window import GlobalWindow, GlobalWindows
from apache_beam.utils.counters import CounterFactory
from apache_beam.utils.windowed_value import WindowedValue

from beam_dask import watch
from runio.heap import numpy_friendly_heap

log = logging.getLogger(__name__)

_GBK_TIMESTAMP = GlobalWindow().max_timestamp()  # the default END_OF_WINDOW timestamp combiner
# One windows tuple for every grouped element: ``GlobalWindows.windowed_value`` builds a GlobalWindow per call,
# whose __init__ decodes the window's end timestamp from a proto (7% of a shuffle-heavy job's worker samples).
_IN_GLOBAL_WINDOW = (GlobalWindow(),)


class Part(list):
    """A list that Dask moves whole: a stage's slots, a split's buckets (``Packed`` or ``Part`` items).

    Dask serializes a plain list whose first element it has a serializer for (bytes, say) element by element:
    every element its own pickle call, frames and header. On the near-dedup shuffle path that was over 40% of
    the workers' CPU time (py-spy, 1x scale corpus). Dask only looks inside objects whose type is exactly list,
    set, tuple or dict, so a subclass goes to the serializer registered for it (``_serialize_chunks``)."""

    __slots__ = ()


_CHUNK = 256  # elements pickled together: pickle's per-call cost amortised, a chunk's objects a few MB at most


class Packed:
    """A partition (or a shuffle bucket) as Dask holds and moves it: its elements pickled ``_CHUNK`` at a time.

    - Iterating decodes one chunk at a time into fresh objects. A stage's DoFns may change the elements they are
      given (the project's steps annotate documents), and a partition can be read twice: by a second consumer,
      or by a stage recomputed after a lost worker. Fresh objects per reading are what Beam's other runners get
      from encoding elements between stages, so no reader sees what another one wrote.
    - Held as bytes, a partition takes a fraction of its objects' memory, Dask's ``sizeof`` is exact (so its
      spilling starts when it should), and moving it to another worker costs a copy of bytes, not a pickling."""

    __slots__ = ("chunks", "count")

    def __init__(self, chunks: list[bytes] | None = None, count: int = 0):
        self.chunks, self.count = chunks if chunks is not None else [], count

    @classmethod
    def of(cls, elements: list) -> "Packed":
        packer = _Packer()
        for element in elements:
            packer.append(element)
        return packer.packed()

    @classmethod
    def joined(cls, parts) -> "Packed":
        return cls([chunk for part in parts for chunk in part.chunks], sum(part.count for part in parts))

    def __iter__(self) -> Iterator:
        for chunk in self.chunks:
            yield from pickle.loads(chunk)

    def __len__(self) -> int:
        return self.count

    def __reduce__(self):
        return Packed, (self.chunks, self.count)


@sizeof.register(Packed)
def _sizeof_packed(part: Packed) -> int:
    return 64 + sum(len(chunk) + 33 for chunk in part.chunks)


# How Dask moves a Packed, or a Part of them (a stage's slots, a split's buckets), between workers and to its
# spill files: its chunks as frames, as they are, with their layout in the header. Pickled, every byte of
# every chunk was copied into a new pickle and the pickle scanned for b"__main__" (Dask then pickles again with
# cloudpickle when it finds it); at 553k documents on 2 workers with 2 GiB each, spilling spent ~160 s of the
# workers' ~760 CPU s in those pickles (py-spy).
def _layout(value, frames: list) -> list:
    if isinstance(value, Packed):
        frames.extend(value.chunks)
        return ["packed", value.count, len(value.chunks)]
    if isinstance(value, Part):
        return ["part", [_layout(item, frames) for item in value]]
    frames.append(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))  # (a slot holds only the two above)
    return ["pickled"]


def _rebuild(layout: list, frames: Iterator):
    kind = layout[0]
    if kind == "packed":
        return Packed([next(frames) for _ in range(layout[2])], layout[1])
    if kind == "part":
        return Part(_rebuild(item, frames) for item in layout[1])
    return pickle.loads(next(frames))


@dask_serialize.register(Packed)
@dask_serialize.register(Part)
def _serialize_chunks(value) -> tuple[dict, list]:
    frames: list = []
    return {"layout": _layout(value, frames)}, frames


@dask_deserialize.register(Packed)
@dask_deserialize.register(Part)
def _deserialize_chunks(header: dict, frames: list):
    return _rebuild(header["layout"], iter(frames))


class _Packer:
    """Collects a stage's output for one slot or bucket, sealing every ``_CHUNK`` elements into bytes: a task
    holds at most one chunk of objects per output bucket, however large its output."""

    __slots__ = ("buffer", "chunks", "count")

    def __init__(self):
        self.buffer: list = []
        self.chunks: list[bytes] = []
        self.count = 0

    def append(self, element) -> None:
        self.buffer.append(element)
        if len(self.buffer) >= _CHUNK:
            self._seal()

    def _seal(self) -> None:
        if self.buffer:
            self.chunks.append(pickle.dumps(self.buffer, protocol=pickle.HIGHEST_PROTOCOL))
            self.count += len(self.buffer)
            self.buffer = []

    def packed(self) -> Packed:
        self._seal()
        return Packed(self.chunks, self.count)


def _sealed(out):
    """A slot's collected output as it leaves the task: a Packed, or a Part of Packed buckets."""
    if isinstance(out, _Packer):
        return out.packed()
    return Part(bucket.packed() for bucket in out)


_lock = threading.Lock()
_JOBS: dict[str, "_JobState"] = {}


class _JobState:
    """What one worker process keeps for one job: plans, pooled DoFns, side-input views."""

    def __init__(self, job_id: str, options: dict | None):
        self.job_id = job_id
        self.plans: dict[int, Any] = {}
        self.pools: dict[str, list] = {}  # op id -> idle DoFn instances (already set up)
        self.all_instances: list = []
        self.sides: dict[str, sideinputs.SideInputMap] = {}
        self.setups = 0
        if options:
            from apache_beam.io.filesystems import FileSystems
            from apache_beam.options.pipeline_options import PipelineOptions

            FileSystems.set_options(PipelineOptions.from_dictionary(options))


def _job(job: tuple[str, dict | None]) -> _JobState:
    job_id, options = job
    with _lock:
        state = _JOBS.get(job_id)
        if state is None:
            state = _JOBS[job_id] = _JobState(job_id, options)
        return state


def _plan(state: _JobState, stage_id: int, plan_bytes: bytes):
    plan = state.plans.get(stage_id)
    if plan is None:
        plan = pickler.loads(plan_bytes)
        with _lock:
            state.plans.setdefault(stage_id, plan)
    return plan


def end_job(job_id: str) -> dict:
    """Tear down the job's pooled DoFns in this worker process and forget the job. Returns a summary."""
    with _lock:
        state = _JOBS.pop(job_id, None)
    if state is None:
        return {"setups": 0, "teardown_errors": 0}
    errors = 0
    for fn, _, _ in state.all_instances:
        try:
            fn.teardown()
        except Exception as error:  # noqa: BLE001 - teardown is best effort in Beam too: counted and said
            errors += 1
            log.warning("job %s: %s.teardown() failed (%s: %s)", job_id, type(fn).__name__, type(error).__name__, error)
    return {"setups": state.setups, "teardown_errors": errors}


def job_setups(job_id: str) -> int:
    """How many DoFn instances this worker process set up for the job (for tests and diagnostics)."""
    state = _JOBS.get(job_id)
    return state.setups if state else 0


@sizeof.register(WindowedValue)
def _sizeof_windowed_value(wv: WindowedValue) -> int:
    """What Dask counts for an element it holds. Its default for an unknown object is ``sys.getsizeof``: 80
    bytes for a WindowedValue however large its document, so a worker holding gigabytes of partitions reported
    almost no managed memory, called it all "unmanaged" and never spilled it when the memory limit was near.
    With the value counted (Dask's own sizeof of dicts, lists and strings, sampled), spilling works."""
    return sys.getsizeof(wv) + sizeof(wv.value)


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none (macOS, musl): nothing to trim there."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def _return_free_memory() -> None:
    """Give the pages glibc's heap holds free back to the system. A stage's temporaries (a partition's copy, the
    documents and shingles it made) are freed into the heap, which keeps them: on the 16× scale corpus a worker
    held 500-600 MB free inside its heap next to 300 MB in use, all of it counted against its memory limit as
    "unmanaged". ``malloc_trim(0)`` releases the free pages anywhere in the heap (Dask's documentation gives the
    same call for unmanaged memory); the threshold Dask's nanny sets only trims the heap's top."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


# -- receivers -------------------------------------------------------------------------------------------

class _ListReceiver(common.Receiver):
    def __init__(self, out: list):
        self.out = out

    def receive(self, windowed_value):
        self.out.append(windowed_value)

    def flush(self):
        pass


class _HashReceiver(common.Receiver):
    """The map side of a GroupByKey fused into the producing stage: (encoded key, value) into buckets; for input
    ``tag`` of a CoGroupByKey, (encoded key, (tag, value))."""

    def __init__(self, buckets: list[list], key_coder, tag: int | None = None):
        self.buckets, self.n, self.encode, self.tag = buckets, len(buckets), key_coder.encode, tag

    def receive(self, windowed_value):
        key, value = windowed_value.value
        kb = self.encode(key)
        self.buckets[zlib.crc32(kb) % self.n].append((kb, value if self.tag is None else (self.tag, value)))

    def flush(self):
        pass


class _DirectReceiver(common.Receiver):
    """The map side of a GroupByKey whose keys are its partitions (``beamio.annotations.SHUFFLE_PARTITIONS``): key k
    into bucket k, encoded and tagged as the hash receiver's are (the reduce side is the same)."""

    def __init__(self, buckets: list[list], key_coder, label: str, tag: int | None = None):
        self.buckets, self.n, self.encode, self.label, self.tag = buckets, len(buckets), key_coder.encode, label, tag

    def receive(self, windowed_value):
        key, value = windowed_value.value
        if type(key) is not int or not 0 <= key < self.n:
            raise ValueError(f"dask runner: {self.label} groups by partition (shuffle_partitions={self.n}) but got "
                             f"the key {key!r}; its keys must be the ints 0..{self.n - 1}")
        self.buckets[key].append((self.encode(key), value if self.tag is None else (self.tag, value)))

    def flush(self):
        pass


class _DealReceiver(common.Receiver):
    """The map side of a Reshuffle fused into the producing stage: round robin from a per-partition offset."""

    def __init__(self, buckets: list[list], offset: int):
        self.buckets, self.n, self.next = buckets, len(buckets), offset % len(buckets)

    def receive(self, windowed_value):
        self.buckets[self.next].append(windowed_value)
        self.next = (self.next + 1) % self.n

    def flush(self):
        pass


class _KeyHashReceiver(common.Receiver):
    """ReshufflePerKey: elements stay whole, placed by a stable hash of the encoded key."""

    def __init__(self, buckets: list[list], key_coder):
        self.buckets, self.n, self.encode = buckets, len(buckets), key_coder.encode

    def receive(self, windowed_value):
        kb = self.encode(windowed_value.value[0])
        self.buckets[zlib.crc32(kb) % self.n].append(windowed_value)

    def flush(self):
        pass


class _Discard(common.Receiver):
    def receive(self, windowed_value):
        pass

    def flush(self):
        pass


_DISCARD = _Discard()


class _Redirect(common.Receiver):
    """A pooled runner's receiver for one output tag: what the current task wires there."""

    __slots__ = ("target",)

    def __init__(self):
        self.target = _DISCARD

    def receive(self, windowed_value):
        self.target.receive(windowed_value)

    def flush(self):
        pass


class _Receivers(dict):
    """Tag -> receiver; outputs to a tag nobody declared are dropped, as in Beam's worker."""

    def __missing__(self, key):
        return _DISCARD


class _OpReceiver(common.Receiver):
    """Feeds elements into a fused downstream DoFn, under its own metrics scope."""

    def __init__(self, runner, state, sdf: bool):
        self.runner, self.state, self.sdf = runner, state, sdf

    def receive(self, windowed_value):
        with self.state:
            if self.sdf:
                residuals = self.runner.process_with_sized_restriction(windowed_value)
                while residuals:  # a bounded SDF that checkpointed: finish its remainder here
                    pending, residuals = list(residuals), []
                    for residual in pending:
                        residuals.extend(self.runner.process_with_sized_restriction(residual.residual_value) or [])
            else:
                self.runner.process(windowed_value)

    def flush(self):
        pass


class _SplitReceiver(common.Receiver):
    """The first half of a splittable DoFn: pair each element with its initial restriction, split and size it."""

    def __init__(self, fn, out, state):
        signature = common.DoFnSignature(fn)
        self.provider = signature.get_restriction_provider()
        self.estimators = signature.get_watermark_estimator_provider()
        self.out, self.state = out, state

    def receive(self, windowed_value):
        with self.state:
            element = windowed_value.value
            restriction = self.provider.initial_restriction(element)
            for part, size in self.provider.split_and_size(element, restriction):
                if size < 0:
                    raise ValueError(f"expected a restriction size >= 0, got {size}")
                estimator_state = self.estimators.initial_estimator_state(element, part)
                self.out.receive(windowed_value.with_value(((element, (part, estimator_state)), size)))

    def flush(self):
        pass


# -- DoFn pool -------------------------------------------------------------------------------------------

class _Pooled:
    """A set-up DoFn instance ``(fn, args, kwargs)`` and, except for an SDF's split, its runner, whose output
    tags lead to ``redirects`` (each task points them at its own receivers)."""

    __slots__ = ("instance", "runner", "redirects")

    def __init__(self, instance, runner=None, redirects=None):
        self.instance, self.runner, self.redirects = instance, runner, redirects or {}


def _acquire(job: _JobState, op, state, sides: dict[str, list]) -> _Pooled:
    with _lock:
        pool = job.pools.setdefault(op.op_id, [])
        if pool:
            return pool.pop()
    instance = pickler.loads(op.fn_payload)  # (fn, args, kwargs): a fresh copy per instance
    pooled = _Pooled(instance)
    if op.kind != "sdf_split":
        with state:
            instance[0].setup()
        fn, args, kwargs = instance
        pooled.redirects = {tag: _Redirect() for tag in (None, *op.outputs)}
        side_maps = [_side_map(job, (op.op_id, position), sides[name], view_class, view_options)
                     for position, (name, view_class, view_options) in enumerate(op.side_inputs)]
        pooled.runner = common.DoFnRunner(fn, args, kwargs, side_maps, op.windowing,
                                          tagged_receivers=_Receivers(pooled.redirects), step_name=op.label)
    with _lock:
        job.all_instances.append(instance)
        job.setups += op.kind != "sdf_split"
    return pooled


def _release(job: _JobState, op, pooled: _Pooled) -> None:
    with _lock:
        job.pools.setdefault(op.op_id, []).append(pooled)


def _discard_instance(job: _JobState, pooled: _Pooled) -> None:
    instance = pooled.instance
    with _lock:
        job.all_instances = [i for i in job.all_instances if i is not instance]
    try:
        instance[0].teardown()
    except Exception as error:  # noqa: BLE001 - a discarded DoFn's teardown is best effort: said, not raised
        log.warning("%s.teardown() of a discarded instance failed (%s: %s)", type(instance[0]).__name__,
                    type(error).__name__, error)


def _side_map(job: _JobState, key: tuple, values: list, view_class, view_options) -> sideinputs.SideInputMap:
    """The side input's view, built once per worker process and job (an AsDict is not rebuilt per task)."""
    side = job.sides.get(key)
    if side is None:
        side = sideinputs.SideInputMap(view_class, view_options, list(values))
        with _lock:
            job.sides.setdefault(key, side)
    return side


# -- stage -----------------------------------------------------------------------------------------------

def _make_slot_receiver(slot, part_index: int):
    kind = slot.kind
    if kind == "list":
        out: Any = _Packer()
        return out, _ListReceiver(out)
    buckets: list = [_Packer() for _ in range(slot.buckets)]
    if kind == "hash":
        return buckets, _HashReceiver(buckets, slot.key_coder, slot.tag)
    if kind == "direct":
        return buckets, _DirectReceiver(buckets, slot.key_coder, slot.label, slot.tag)
    if kind == "deal":
        return buckets, _DealReceiver(buckets, part_index)
    if kind == "keyhash":
        return buckets, _KeyHashReceiver(buckets, slot.key_coder)
    raise ValueError(f"unknown slot kind {kind!r}")


def _root_elements(root: tuple, key_coder, tags: list | None = None) -> Iterator:
    """A stage's input as fresh objects (see ``Packed``), decoded a chunk at a time as the stage consumes it."""
    kind = root[0]
    if kind == "impulse":
        return iter([GlobalWindows.windowed_value(b"")])
    if kind == "list":
        return iter(root[1])
    if kind == "concat":
        return (wv for piece in root[1] for wv in _piece(piece))
    if kind == "group":
        return iter(group_pieces(root[1], key_coder, tags))
    raise ValueError(f"unknown root kind {kind!r}")


def run_stage(job: tuple, stage_id: int, plan_bytes: bytes, part_index: int, root: tuple,
              sides: dict[str, list]) -> list:
    """Run one fused stage over one input partition; return its materialised outputs (one per slot). Its
    metric updates go to the scheduler as an event (see ``watch.py``), just before the task finishes."""
    numpy_friendly_heap()  # Dask's nanny started this process with glibc's dynamic thresholds off
    state_of_job = _job(job)
    plan = _plan(state_of_job, stage_id, plan_bytes)
    sampler = statesampler.StateSampler(f"dask-{plan.name}", CounterFactory())
    previous_tracker = statesampler.get_current_tracker()
    statesampler.set_current_tracker(sampler)
    acquired: list = []
    failed = False
    try:
        slots_out: list = []
        slot_receivers: list = []
        for slot in plan.slots:
            out, receiver = _make_slot_receiver(slot, part_index)
            slots_out.append(out)
            slot_receivers.append(receiver)
        containers = [MetricsContainer(op.label) for op in plan.ops]
        states = [sampler.scoped_state(op.label, "process", metrics_container=c)
                  for op, c in zip(plan.ops, containers)]
        entry: list = [None] * len(plan.ops)  # receiver that feeds op i
        runners: list = [None] * len(plan.ops)
        # build from the leaves up: an op's receivers are its children's entries and its slots
        for index in reversed(range(len(plan.ops))):
            op = plan.ops[index]
            pooled = _acquire(state_of_job, op, states[index], sides)
            acquired.append((op, pooled))

            def target(t):
                return entry[t[1]] if t[0] == "op" else slot_receivers[t[1]] if t[0] == "slot" else _DISCARD

            if op.kind == "sdf_split":
                entry[index] = _SplitReceiver(pooled.instance[0], target(op.outputs.get(None, ("drop",))),
                                              states[index])
                continue
            for tag, redirect in pooled.redirects.items():
                redirect.target = target(op.outputs[tag]) if tag in op.outputs else _DISCARD
            runners[index] = pooled.runner
            entry[index] = _OpReceiver(pooled.runner, states[index], op.kind == "sdf_process")
        for index in reversed(range(len(plan.ops))):
            if runners[index] is not None:
                with states[index]:
                    runners[index].start()
        feed = entry[0]
        for wv in _root_elements(root, plan.root_key_coder, plan.root_tags):
            feed.receive(wv)
        for index in range(len(plan.ops)):  # parents first: a finish_bundle may emit into its children
            if runners[index] is not None:
                with states[index]:
                    runners[index].finish()
        for index in range(len(plan.ops)):
            if runners[index] is not None:
                with states[index]:
                    runners[index].finalize()
        metrics = []
        for container in containers:
            metrics.extend(_metric_updates(container))
        _report_metrics(state_of_job.job_id, metrics)
        return Part(_sealed(out) for out in slots_out)
    except BaseException:
        failed = True
        raise
    finally:
        statesampler.set_current_tracker(previous_tracker)
        for op, pooled in acquired:
            for redirect in pooled.redirects.values():
                redirect.target = _DISCARD  # a pooled runner holds no task's buckets
            if failed and op.kind != "sdf_split":
                _discard_instance(state_of_job, pooled)  # Beam discards a DoFn whose bundle failed
            else:
                _release(state_of_job, op, pooled)
        _return_free_memory()


def _report_metrics(job_id: str, metrics: list) -> None:
    """This attempt's metric updates, to the scheduler, ahead of the task's own completion message."""
    worker = distributed.get_worker()
    worker.log_event(watch.metrics_topic(job_id), {"key": worker.get_current_task(), "worker": worker.address,
                                                   "metrics": pickle.dumps(metrics)})


def _metric_updates(container: MetricsContainer) -> list:
    updates = container.get_cumulative()
    out = [("counter", k, v) for k, v in updates.counters.items() if v]
    out += [("distribution", k, v) for k, v in updates.distributions.items()]
    out += [("gauge", k, v) for k, v in updates.gauges.items()]
    out += [("string_set", k, v) for k, v in updates.string_sets.items()]
    out += [("bounded_trie", k, v) for k, v in updates.bounded_tries.items()]
    out += [("histogram", k, v) for k, v in updates.histograms.items()]
    return out


# -- small tasks -----------------------------------------------------------------------------------------

def impulse() -> Packed:
    return Packed.of([GlobalWindows.windowed_value(b"")])


def pick(result: list, slot: int):
    return result[slot]


def _buckets(result: list, slot: int | None) -> list:
    """A stage's buckets for one shuffle (its ``slot``), or a split task's or a merged range's (``None``)."""
    return result if slot is None else result[slot]


def pick_bucket(result: list, slot: int | None, bucket: int) -> Packed:
    return _buckets(result, slot)[bucket]


def _piece(piece) -> Packed:
    """A shuffle piece: a picked bucket, or ``(result, slot, bucket)``, a whole source's output from which the
    reading task picks its bucket itself (a small job's shuffle: ``translate.Emitter`` ``whole_sources``)."""
    return pick_bucket(*piece) if isinstance(piece, tuple) else piece


def bucket_range(result: list, slot: int | None, lo: int, hi: int) -> Part:
    """Buckets ``lo``..``hi - 1``: a staged shuffle's first round."""
    return Part(_buckets(result, slot)[lo:hi])


def merge_buckets(ranges: list[Part]) -> Part:
    """The same bucket range of several sources, joined bucket by bucket in source order (chunks are not
    decoded): a staged shuffle's second round."""
    return Part(Packed.joined(column) for column in zip(*ranges))


def empty() -> Packed:
    return Packed()


def concat(parts: list[Packed]) -> Packed:
    return Packed.joined(parts)


def concat_pieces(pieces: list) -> Packed:
    return Packed.joined([_piece(p) for p in pieces])


def count(part: Packed) -> int:
    return len(part)


def split(part: Packed, slot, part_index: int) -> Part:
    """The map side of a shuffle over a partition that no fused stage bucketed (a split task): the receivers of
    a fused map side (``slot``: hash, direct, keyhash or deal), ``part_index`` the deal's round-robin offset."""
    out, receiver = _make_slot_receiver(slot, part_index)
    for wv in part:
        receiver.receive(wv)
    return _sealed(out)


def group_pieces(pieces: list[Packed], key_coder, tags: list | None = None) -> list:
    """The reduce side of a GroupByKey: values of equal encoded keys together, in piece order (fresh objects:
    the pieces are decoded here). With a CoGroupByKey's ``tags``, the values came as (tag index, value) and each
    group is ``{tag: [values]}``, every tag present, as Beam's expansion gives."""
    if tags is not None:
        return _cogroup_pieces(pieces, key_coder, tags)
    groups: dict[bytes, list] = {}
    for piece in pieces:
        for kb, value in _piece(piece):
            values = groups.get(kb)
            if values is None:
                groups[kb] = [value]
            else:
                values.append(value)
    decode = key_coder.decode
    return [WindowedValue((decode(kb), values), _GBK_TIMESTAMP, _IN_GLOBAL_WINDOW) for kb, values in groups.items()]


def _cogroup_pieces(pieces: list[Packed], key_coder, tags: list) -> list:
    groups: dict[bytes, list[list]] = {}
    width = len(tags)
    for piece in pieces:
        for kb, (tag, value) in _piece(piece):
            lists = groups.get(kb)
            if lists is None:
                lists = groups[kb] = [[] for _ in range(width)]
            lists[tag].append(value)
    decode = key_coder.decode
    return [WindowedValue((decode(kb), dict(zip(tags, lists))), _GBK_TIMESTAMP, _IN_GLOBAL_WINDOW)
            for kb, lists in groups.items()]


def group_task(pieces: list[Packed], key_coder, tags: list | None = None) -> Packed:
    return Packed.of(group_pieces(pieces, key_coder, tags))


# -- metrics merge (client side, kept here next to the producer of the format) ------------------------------

def merge_metric_updates(into: dict, updates: list) -> None:
    """Fold one committed task's updates into ``into[(kind, MetricKey)]``."""
    for kind, key, value in updates:
        slot = (kind, key)
        if kind == "counter":
            into[slot] = into.get(slot, 0) + value
        elif slot in into:
            into[slot] = into[slot].combine(value)
        else:
            into[slot] = value
