"""Client side of the Beam-on-Dask runner: the Python pipeline graph → fused stages → a Dask task graph.

Three passes:

1. ``build_ir``: walk the pipeline's ``AppliedPTransform`` tree down to the primitives Beam's Python SDK
   expands everything into — ``Impulse``, ``ParDo`` (``WindowInto`` included), ``GroupByKey``, ``Flatten`` —
   plus ``Reshuffle``/``ReshufflePerKey``, which are translated as a whole (a repartition, not Beam's
   random-key GroupByKey with a trigger), and ``CoGroupByKey``, grouped as one GroupByKey of its inputs whose
   buckets record which input each value came from (Beam's expansion adds a tagging DoFn per input and a
   collecting one after the grouping: each costs a worker ~4 ms to unpickle and inspect, at any size). Splittable DoFns (every ``Read`` of a bounded source:
   ``ReadFromText``, ``ReadFromParquet``, ...) become split → round-robin repartition → process.
   Anything else — state and timers, batched DoFns, windowing other than the global window, triggers,
   unbounded collections, unknown primitives — raises ``UnsupportedPipeline`` here, before any work.
2. ``plan``: fuse chains of ParDos into stages (a ParDo joins its producer's stage when it is the only
   consumer of that output and the fusion creates no cycle through a side input), fuse the map side of a
   shuffle into the stages that produce its input (also through Flattens that only it reads: each input of a
   CoGroupByKey fills its buckets where it is produced) and the reduce side into the stage that consumes it.
3. ``emit``: one Dask task per stage and input partition, plus the shuffle pieces, side-input
   materialisations (one task per side input: computed once). Every stage task is submitted fire-and-forget,
   so every stage runs, sinks included; ``watch.py`` tracks their completion and metrics on the scheduler.

A PCollection is a list of partitions (Dask keys holding ``execute.Packed`` lists of ``WindowedValue``, pickled
a chunk at a time). Partition counts are fixed at translation: a shuffle produces ``partitions`` outputs (a
GroupByKey annotated ``SHUFFLE_PARTITIONS`` its own count, its keys being those partitions); other transforms
keep their input's count; ``Flatten`` concatenates its inputs' partition lists (no task). A shuffle of S source
partitions into N outputs moves its buckets by S × N small pick tasks; above ``STAGED_SHUFFLE_ABOVE`` of them it
goes in two rounds instead (``Emitter.staged_pieces``).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam
from apache_beam import coders, pvalue
from apache_beam.internal import pickler
from apache_beam.runners import common
from apache_beam.transforms import core, util
from apache_beam.transforms.trigger import DefaultTrigger
from apache_beam.transforms.window import GlobalWindows, TimestampCombiner
from apache_beam.typehints import trivial_inference
from dask._task_spec import DataNode, Task, TaskRef, parse_input

from beam_dask import execute
from beam_dask.lifting import MergeAndExtractFn, PartialCombineFn
from beamio.annotations import SHUFFLE_PARTITIONS


class UnsupportedPipeline(ValueError):
    """The pipeline uses a construct this runner does not execute; raised at translation, before any work."""


# A GroupByKey annotated SHUFFLE_PARTITIONS=N (its keys are the ints 0..N-1, each naming a partition already) is
# grouped into exactly N partitions, key k into partition k (a key outside fails the job, naming the transform),
# instead of hashing keys into the pipeline's partition count. A step whose elements are blocks keyed by its own
# partitions (near-dedup) so costs N × N bucket tasks per shuffle (fewer, in two rounds, past
# STAGED_SHUFFLE_ABOVE), not the pipeline's count squared, and every partition gets one block's worth.


def _annotated_partitions(applied) -> int | None:
    raw = (getattr(applied, "annotations", None) or {}).get(SHUFFLE_PARTITIONS)
    if raw is None:
        return None
    try:
        value = int(raw.decode("ascii") if isinstance(raw, bytes) else raw)
    except ValueError:
        value = 0
    if value < 1:
        raise UnsupportedPipeline(f"dask runner: {_describe(applied)} is annotated {SHUFFLE_PARTITIONS}={raw!r}; "
                                  f"expected a positive number of partitions")
    return value


# A shuffle moves bucket j of every source partition to output j: S × N pick tasks for S sources and N outputs,
# each about a millisecond of the scheduler's and a worker's time however small. At hundreds of partitions the
# picks alone would take minutes per shuffle (1,600 partitions: 2.6 M tasks). Above this many picks a shuffle
# goes in two rounds of about S × √N tasks each (``Emitter.staged_pieces``), whose data cross between workers
# twice instead of once. Measured on 2 workers (benchmarks/bench_dask_shuffle.py, RESULTS.md): with little data
# staging pays from 10 × 10 partitions; with 400 MB per shuffle it is level at 16 × 16 (2.1 s either way) and
# 1.4× / 1.9× faster at 32 × 32 / 64 × 64; at 8 × 8 direct is faster (0.70 against 0.79 s).
STAGED_SHUFFLE_ABOVE = 16 * 16

# A small job (``whole_sources``: the runner's input is at most one partition's budget) shuffles without pick
# tasks: each reducing task depends on its sources' whole outputs and picks its buckets itself. Each pick task
# costs the job one scheduling round trip per shuffle (Dask batches the scheduler's messages every 5 ms and the
# workers' every 2 ms), which on 2 workers was most of a small job's time between its stages; the price, a
# worker holding copies of the whole shuffle rather than its share, is bounded by the input's size.


@dataclass(frozen=True)
class _WholeSource:
    """A piece of a whole-source shuffle: bucket ``bucket`` of the output held by task ``key`` (in ``slot``)."""
    key: Any
    slot: int | None
    bucket: int


# -- intermediate representation -------------------------------------------------------------------------

@dataclass(eq=False)
class PC:
    id: int
    label: str
    windowing: Any = None


@dataclass(eq=False)
class Node:
    id: int
    kind: str  # impulse | pardo | sdf_split | sdf_process | gbk | shuffle | flatten
    label: str
    ins: list[PC] = field(default_factory=list)  # main input (one) or flatten inputs
    outs: dict = field(default_factory=dict)  # tag (None = main) -> PC
    sides: list = field(default_factory=list)  # (PC, view class, view options)
    payload: bytes | None = None  # pickled (DoFn, args, kwargs)
    windowing: Any = None
    mode: str | None = None  # shuffle: deal | keyhash
    key_coder: Any = None  # gbk, keyhash shuffle
    partitions: int | None = None  # gbk annotated SHUFFLE_PARTITIONS: its keys are the partitions 0..n-1
    tags: list | None = None  # gbk of a CoGroupByKey: its tags, one per input of the Flatten it groups, in order


@dataclass
class Slot:
    kind: str  # list | hash | deal | keyhash | direct
    buckets: int = 0
    key_coder: Any = None
    label: str = ""  # direct: the GroupByKey, named in the error for a key that is not a partition
    tag: int | None = None  # hash, direct: a CoGroupByKey's input; values are bucketed as (tag, value)


@dataclass
class OpSpec:
    op_id: str
    label: str
    kind: str  # pardo | sdf_split | sdf_process
    fn_payload: bytes
    side_inputs: list  # (side key name, view class, view options)
    windowing: Any
    outputs: dict  # tag -> ("op", index) | ("slot", index) | ("drop",)


@dataclass
class StagePlan:
    name: str
    ops: list
    slots: list
    root_key_coder: Any = None
    root_tags: list | None = None  # the stage reads a CoGroupByKey: (key, {tag: [values]}), as Beam's gives


def _describe(applied) -> str:
    return f"{applied.full_label!r} ({type(applied.transform).__name__})"


def _check_global(pcoll, applied) -> None:
    if not isinstance(pcoll, pvalue.PCollection):
        return
    if not pcoll.is_bounded:
        raise UnsupportedPipeline(f"dask runner: {_describe(applied)} reads or produces an unbounded PCollection; "
                                  f"only bounded (batch) pipelines are supported")
    windowing = pcoll.windowing
    if not isinstance(windowing.windowfn, GlobalWindows):
        raise UnsupportedPipeline(f"dask runner: {_describe(applied)} uses windowing "
                                  f"{type(windowing.windowfn).__name__}; only the global window is supported")


def _check_grouping(pcoll, applied) -> None:
    windowing = pcoll.windowing
    if windowing.triggerfn != DefaultTrigger():
        raise UnsupportedPipeline(f"dask runner: {_describe(applied)} groups under trigger "
                                  f"{windowing.triggerfn}; only the default trigger is supported")
    if windowing.timestamp_combiner != TimestampCombiner.OUTPUT_AT_EOW:
        raise UnsupportedPipeline(f"dask runner: {_describe(applied)} uses timestamp combiner "
                                  f"{windowing.timestamp_combiner}; only OUTPUT_AT_EOW is supported")


def _key_coder(pcoll, label: str, key_type=None):
    if key_type is None:
        key_type, _ = trivial_inference.key_value_types(pcoll.element_type)
    coder = coders.registry.get_coder(key_type)
    try:
        return coder.as_deterministic_coder(label)
    except ValueError:
        # the FnApiRunner groups by these same encoded bytes; a value that cannot be encoded
        # deterministically fails at encoding time there as here
        return coders.registry.get_coder(beam.typehints.Any).as_deterministic_coder(label)


# CoGroupByKey's inner composite, the one that tags, flattens, groups and collects (string tags; the outer one
# maps other tags onto strings and back around it). Translated as one grouping (``_IRBuilder.cogroup``); were
# Beam to rename it, its expansion is translated as it is, as any composite's.
_COGBK_IMPL = getattr(util, "_CoGBKImpl", None)


class _IRBuilder:
    def __init__(self):
        self.nodes: list[Node] = []
        self.pcs: dict[int, PC] = {}
        self._keep: list = []  # keep Beam objects alive so their id() stays unique

    def pc(self, pcoll) -> PC:
        key = id(pcoll)
        if key not in self.pcs:
            self._keep.append(pcoll)
            self.pcs[key] = PC(len(self.pcs), str(pcoll), getattr(pcoll, "windowing", None))
        return self.pcs[key]

    def synthetic(self, label: str) -> PC:
        self._keep.append(object())
        p = PC(len(self.pcs), label)
        self.pcs[id(self._keep[-1])] = p
        return p

    def node(self, kind: str, label: str, **kw) -> Node:
        n = Node(len(self.nodes), kind, label, **kw)
        self.nodes.append(n)
        return n

    def walk(self, applied) -> None:
        transform = applied.transform
        if isinstance(transform, (util.Reshuffle, util.ReshufflePerKey)):
            self.reshuffle(applied)
        elif type(transform) is core.CombinePerKey and self.liftable(applied):
            self.combine(applied)
        elif _COGBK_IMPL is not None and type(transform) is _COGBK_IMPL:
            self.cogroup(applied)
        elif applied.parts:
            for part in applied.parts:
                self.walk(part)
        elif applied.transform is not None:
            self.leaf(applied)

    def _main_input(self, applied):
        inputs = [i for i in applied.inputs if not isinstance(i, pvalue.PBegin)]
        if len(inputs) != 1:
            raise UnsupportedPipeline(f"dask runner: {_describe(applied)} has {len(inputs)} main inputs, expected 1")
        _check_global(inputs[0], applied)
        return inputs[0]

    def _outputs(self, applied) -> dict:
        outs = {}
        for tag, pcoll in applied.outputs.items():
            _check_global(pcoll, applied)
            outs[tag] = self.pc(pcoll)
        return outs

    def reshuffle(self, applied) -> None:
        main = self._main_input(applied)
        keyed = isinstance(applied.transform, util.ReshufflePerKey)
        self.node("shuffle", applied.full_label, ins=[self.pc(main)], outs=self._outputs(applied),
                  mode="keyhash" if keyed else "deal",
                  key_coder=_key_coder(main, applied.full_label) if keyed else None)

    def liftable(self, applied) -> bool:
        transform = applied.transform
        if transform.side_inputs or getattr(transform, "_using_gbek", False):
            return False  # expanded as Beam does (GroupByKey + CombineValues)
        main = self._main_input(applied)
        return main.windowing.is_default()

    def combine(self, applied) -> None:
        transform = applied.transform
        label = applied.full_label
        main = self._main_input(applied)
        key_coder = _key_coder(main, label)
        partial_out = self.synthetic(f"{label}/accumulators")
        grouped = self.synthetic(f"{label}/grouped-accumulators")
        windowing = main.windowing
        fn, args, kwargs = transform.fn, transform.args, transform.kwargs
        self.node("pardo", f"{label}/PartialCombine", ins=[self.pc(main)], outs={None: partial_out},
                  payload=pickler.dumps((PartialCombineFn(fn, args, kwargs, key_coder), (), {})), windowing=windowing)
        self.node("gbk", f"{label}/GroupAccumulators", ins=[partial_out], outs={None: grouped}, key_coder=key_coder)
        self.node("pardo", f"{label}/MergeAndExtract", ins=[grouped], outs=self._outputs(applied),
                  payload=pickler.dumps((MergeAndExtractFn(fn, args, kwargs), (), {})), windowing=windowing)

    def cogroup(self, applied) -> None:
        """``CoGroupByKey``'s expansion (``{tag: pcoll}`` → ``(key, {tag: [values]})``) as one GroupByKey of the
        Flatten of its inputs: the buckets of input i hold ``(i, value)`` (``Slot.tag``) and the reduce side
        sorts the values by tag (``StagePlan.root_tags``), where Beam tags and collects them with DoFns."""
        label = applied.full_label
        tags = list(applied.main_inputs)
        inputs = list(applied.main_inputs.values())
        for pcoll in inputs:
            _check_global(pcoll, applied)
            _check_grouping(pcoll, applied)
        key_type = beam.typehints.Union[tuple(trivial_inference.key_value_types(p.element_type)[0] for p in inputs)]
        flattened = self.synthetic(f"{label}/Flatten")
        self.node("flatten", f"{label}/Flatten", ins=[self.pc(p) for p in inputs], outs={None: flattened})
        self.node("gbk", label, ins=[flattened], outs=self._outputs(applied),
                  key_coder=_key_coder(None, label, key_type), partitions=_annotated_partitions(applied), tags=tags)

    def leaf(self, applied) -> None:
        transform = applied.transform
        label = applied.full_label
        for pcoll in applied.outputs.values():  # unbounded sources (TestStream, ...) are named as such
            _check_global(pcoll, applied)
        if isinstance(transform, core.Impulse):
            self.node("impulse", label, outs=self._outputs(applied))
        elif isinstance(transform, core.ParDo):
            self.pardo(applied)
        elif isinstance(transform, core.GroupByKey):
            main = self._main_input(applied)
            _check_grouping(main, applied)
            self.node("gbk", label, ins=[self.pc(main)], outs=self._outputs(applied),
                      key_coder=_key_coder(main, label), partitions=_annotated_partitions(applied))
        elif isinstance(transform, core.Flatten):
            ins = []
            for i in applied.inputs:
                _check_global(i, applied)
                ins.append(self.pc(i))
            self.node("flatten", label, ins=ins, outs=self._outputs(applied))
        elif applied.outputs and all(any(o is i for i in applied.inputs) for o in applied.outputs.values()):
            return  # a composite that expanded to nothing (returns its input), e.g. Create's MaybeReshuffle
        else:
            raise UnsupportedPipeline(f"dask runner: no translation for primitive {_describe(applied)}")

    def pardo(self, applied) -> None:
        transform = applied.transform
        fn = transform.fn
        label = applied.full_label
        signature = common.DoFnSignature(fn)  # inspects the DoFn's methods once (~1 ms): state, timers, SDF
        if signature.is_stateful_dofn():
            raise UnsupportedPipeline(f"dask runner: {_describe(applied)} uses state or timers (a stateful "
                                      f"DoFn: {type(fn).__name__}); not supported")
        if fn._process_batch_defined or fn._can_yield_batches:
            raise UnsupportedPipeline(f"dask runner: {_describe(applied)} is a batched DoFn "
                                      f"({type(fn).__name__}.process_batch); not supported")
        main = self._main_input(applied)
        sides = []
        for si in transform.side_inputs:
            _check_global(si.pvalue, applied)
            sides.append((self.pc(si.pvalue), type(si), si._view_options()))
        outs = self._outputs(applied)
        try:
            payload = pickler.dumps((fn, transform.args, transform.kwargs))
        except Exception as err:
            raise UnsupportedPipeline(f"dask runner: cannot serialise the DoFn of {_describe(applied)}: {err}") from err
        windowing = main.windowing
        if signature.is_splittable_dofn():
            if signature.is_unbounded_per_element():
                raise UnsupportedPipeline(f"dask runner: {_describe(applied)} is an unbounded splittable DoFn")
            restrictions = self.synthetic(f"{label}/restrictions")
            spread = self.synthetic(f"{label}/spread-restrictions")
            self.node("sdf_split", f"{label}/PairSplitAndSize", ins=[self.pc(main)], outs={None: restrictions},
                      payload=payload, windowing=windowing)
            self.node("shuffle", f"{label}/SpreadRestrictions", ins=[restrictions], outs={None: spread},
                      mode="deal")
            self.node("sdf_process", label, ins=[spread], outs=outs, sides=sides, payload=payload,
                      windowing=windowing)
        else:
            self.node("pardo", label, ins=[self.pc(main)], outs=outs, sides=sides, payload=payload,
                      windowing=windowing)


def build_ir(pipeline: beam.Pipeline) -> tuple[list[Node], dict]:
    builder = _IRBuilder()
    builder.walk(pipeline._root_transform())
    return builder.nodes, builder


# -- planning --------------------------------------------------------------------------------------------

_OPS = ("pardo", "sdf_split", "sdf_process")


@dataclass(eq=False)
class Stage:
    id: int
    nodes: list[Node]


class Plan:
    """Stages and the data-flow facts that emission needs."""

    def __init__(self, nodes: list[Node], keepalive):
        self.nodes = nodes
        self._keepalive = keepalive
        self.producer: dict[int, Node] = {}
        for n in nodes:
            for out in n.outs.values():
                self.producer[out.id] = n
        self.usages: dict[int, list[tuple[Node, str]]] = {}
        for n in nodes:
            for i in n.ins:
                self.usages.setdefault(i.id, []).append((n, "flatten" if n.kind == "flatten" else
                                                          "shuffle" if n.kind in ("gbk", "shuffle") else "main"))
            for side, _, _ in n.sides:
                self.usages.setdefault(side.id, []).append((n, "side"))
        # ancestors (node ids) of every PCollection, through main and side inputs
        self.anc: dict[int, frozenset] = {}
        for n in nodes:
            deps = set()
            for i in n.ins:
                deps |= self.anc.get(i.id, frozenset())
            for side, _, _ in n.sides:
                deps |= self.anc.get(side.id, frozenset())
            deps.add(n.id)
            frozen = frozenset(deps)
            for out in n.outs.values():
                self.anc[out.id] = frozen
        self.stage_of: dict[int, Stage] = {}
        self.stages: list[Stage] = []
        for n in nodes:
            if n.kind not in _OPS:
                continue
            main = n.ins[0]
            producer = self.producer.get(main.id)
            if (producer is not None and producer.kind in _OPS and self.sole_usage(main) == (n, "main")
                    and self._acyclic(self.stage_of[producer.id].nodes + [n])):
                stage = self.stage_of[producer.id]
                stage.nodes.append(n)
            else:
                stage = Stage(len(self.stages), [n])
                self.stages.append(stage)
            self.stage_of[n.id] = stage

    def sole_usage(self, pc: PC):
        uses = self.usages.get(pc.id, [])
        return uses[0] if len(uses) == 1 else None

    def _acyclic(self, members: list[Node]) -> bool:
        ids = {m.id for m in members}
        return all(not (self.anc.get(side.id, frozenset()) & ids) for m in members for side, _, _ in m.sides)

    def shuffle_reading(self, pc: PC) -> Node | None:
        """The shuffle that is the only reader of ``pc``, directly or through Flattens that nothing else reads
        (a CoGroupByKey is a Flatten of tagged inputs into one GroupByKey), or None."""
        use = self.sole_usage(pc)
        while use is not None and use[1] == "flatten":
            use = self.sole_usage(next(iter(use[0].outs.values())))
        return use[0] if use is not None and use[1] == "shuffle" else None

    def source_tags(self, shuffle: Node) -> list:
        """For each of ``shuffle_sources``: the index of the CoGroupByKey input it belongs to (None for a plain
        shuffle)."""
        if shuffle.tags is None:
            return [None] * len(self.shuffle_sources(shuffle.ins[0]))
        joined = self.producer[shuffle.ins[0].id]
        return [tag for tag, top in enumerate(joined.ins) for _ in self.shuffle_sources(top)]

    def fused_map_side(self, pc: PC) -> bool:
        """Whether the shuffle reading ``pc`` gets its buckets straight from the stage producing ``pc`` (so an
        input of a join is pickled once, into its buckets, not first as a stage output and again by a split)."""
        producer = self.producer.get(pc.id)
        return producer is not None and producer.kind in _OPS and self.shuffle_reading(pc) is not None

    def shuffle_sources(self, pc: PC) -> list[PC]:
        """The PCollections a shuffle of ``pc`` reads: ``pc`` itself, or the inputs of the Flattens producing it,
        in the Flatten's order (the order the shuffle's pieces, and so each group's values, come in)."""
        producer = self.producer.get(pc.id)
        if producer is None or producer.kind != "flatten" or not producer.ins:
            return [pc]
        return [leaf for i in producer.ins for leaf in self.shuffle_sources(i)]

    def fused_reduce_side(self, pc: PC) -> bool:
        producer = self.producer.get(pc.id)
        use = self.sole_usage(pc)
        return (producer is not None and producer.kind in ("gbk", "shuffle") and use is not None
                and use[1] == "main" and use[0].kind in _OPS and self.stage_of[use[0].id].nodes[0] is use[0])


# -- emission --------------------------------------------------------------------------------------------

def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_./()\[\]-]+", "_", text)[-60:]


class Emitter:
    def __init__(self, plan: Plan, job_id: str, partitions: int, options: dict | None,
                 staged_above: int = STAGED_SHUFFLE_ABOVE, whole_sources: bool = False):
        self.plan = plan
        self.staged_above = staged_above
        self.whole_sources = whole_sources
        self.job = (job_id, options)
        self.tag = job_id[:8]
        self.R = partitions
        self.graph: dict = {}
        self._parts: dict[int, list] = {}
        self._pieces: dict[int, list[list]] = {}
        self._side: dict[int, Any] = {}
        self._stage_keys: dict[int, list] = {}
        self._stage_slots: dict[int, dict[int, int]] = {}  # stage id -> pc id -> slot index
        self.stage_keys: list = []  # every stage task: run once each, each reports its metrics
        self.terminal_keys: list = []  # the outputs nobody consumes and no stage produces
        self.stage_tasks = 0

    def add(self, key, func, *args):
        self.graph[key] = Task(key, func, *(parse_input(a) for a in args))
        return key

    @staticmethod
    def piece_refs(pieces: list) -> list:
        """A reducer's pieces as task arguments (see ``execute._piece``)."""
        return [(TaskRef(p.key), p.slot, p.bucket) if isinstance(p, _WholeSource) else TaskRef(p) for p in pieces]

    def buckets(self, shuffle: Node) -> int:
        """Output partitions of a shuffle: its annotated count, or the pipeline's."""
        return shuffle.partitions or self.R

    def map_side(self, shuffle: Node, tag: int | None = None) -> Slot:
        """How a shuffle's input is bucketed, in a fused stage or a split task: a GroupByKey by its keys' hash (or,
        annotated, by the keys themselves), a Reshuffle by its mode; ``tag``: the CoGroupByKey input it is."""
        if shuffle.kind == "gbk":
            kind = "direct" if shuffle.partitions else "hash"
        else:
            kind = shuffle.mode
        return Slot(kind, self.buckets(shuffle), shuffle.key_coder, shuffle.label, tag)

    def source_map_side(self, pc: PC) -> Slot:
        """The map side of the shuffle reading ``pc`` (a fused one: ``pc`` is among its sources once)."""
        shuffle = self.plan.shuffle_reading(pc)
        sources = self.plan.shuffle_sources(shuffle.ins[0])
        position = next(i for i, source in enumerate(sources) if source is pc)
        return self.map_side(shuffle, self.plan.source_tags(shuffle)[position])

    def name(self, kind: str, node_id: int, label: str) -> str:
        return f"beam-{kind}-{node_id}-{_slug(label)}-{self.tag}"

    # PCollection partitions ----------------------------------------------------------------------------
    def parts(self, pc: PC) -> list:
        if pc.id in self._parts:
            return self._parts[pc.id]
        producer = self.plan.producer.get(pc.id)
        if producer is None:
            raise UnsupportedPipeline(f"dask runner: no producer for {pc.label}")
        if producer.kind == "impulse":
            keys = [self.add((self.name("impulse", producer.id, producer.label), 0), execute.impulse)]
        elif producer.kind == "flatten":
            keys = [k for i in producer.ins for k in self.parts(i)]
            if not keys:
                keys = [self.add((self.name("empty", producer.id, producer.label), 0), execute.empty)]
        elif producer.kind in ("gbk", "shuffle"):
            pieces = self.pieces(producer)
            name = self.name("reduce", producer.id, producer.label)
            if producer.kind == "gbk":
                keys = [self.add((name, j), execute.group_task, self.piece_refs(pieces[j]),
                                 producer.key_coder, producer.tags) for j in range(self.buckets(producer))]
            else:
                keys = [self.add((name, j), execute.concat_pieces, self.piece_refs(pieces[j]))
                        for j in range(self.buckets(producer))]
        else:
            stage = self.plan.stage_of[producer.id]
            self.emit_stage(stage)
            slot = self._stage_slots[stage.id][pc.id]
            name = self.name(f"out{pc.id}", producer.id, pc.label)
            keys = [self.add((name, i), execute.pick, TaskRef(sk), slot)
                    for i, sk in enumerate(self._stage_keys[stage.id])]
        self._parts[pc.id] = keys
        return keys

    def pieces(self, shuffle: Node) -> list[list]:
        """pieces[j]: the keys holding the elements bound for output partition j of this shuffle, in the order of
        the shuffle's sources (a GroupByKey's groups list their values in that order, whichever way they moved)."""
        if shuffle.id in self._pieces:
            return self._pieces[shuffle.id]
        n = self.buckets(shuffle)
        tags = self.plan.source_tags(shuffle)
        # Every source partition as (key of the task holding its buckets, the slot they are in, or None for a
        # split task, which holds only them), with the name its direct picks have always had.
        sources: list[tuple[Any, int | None, tuple]] = []
        offset = 0  # a Reshuffle deals each input partition from its own index
        for position, source in enumerate(self.plan.shuffle_sources(shuffle.ins[0])):
            bucket_name = self.name(f"bucket{position}", shuffle.id, shuffle.label)
            if self.plan.fused_map_side(source):
                producer = self.plan.producer[source.id]
                stage = self.plan.stage_of[producer.id]
                self.emit_stage(stage)
                slot = self._stage_slots[stage.id][source.id]
                sources.extend((sk, slot, (bucket_name, i)) for i, sk in enumerate(self._stage_keys[stage.id]))
                continue
            split_name = self.name(f"split{position}", shuffle.id, shuffle.label)
            for i, part in enumerate(self.parts(source)):
                split = self.add((split_name, i), execute.split, TaskRef(part), self.map_side(shuffle, tags[position]),
                                 offset + i)
                sources.append((split, None, (bucket_name, i)))
            offset += len(self.parts(source))
        if self.whole_sources:
            pieces = [[_WholeSource(key, slot, j) for key, slot, _ in sources] for j in range(n)]
        elif len(sources) * n > self.staged_above:
            pieces = self.staged_pieces(shuffle, sources, n)
        else:
            pieces = [[] for _ in range(n)]
            for key, slot, name in sources:
                for j in range(n):
                    pieces[j].append(self.add((*name, j), execute.pick_bucket, TaskRef(key), slot, j))
        self._pieces[shuffle.id] = pieces
        return pieces

    def staged_pieces(self, shuffle: Node, sources: list, n: int) -> list[list]:
        """A shuffle in two rounds: the S sources in groups of ⌈√S⌉, the N outputs in ranges of ⌈√N⌉ buckets.

        1. ``ranges``: each source's buckets of one output range (on the source's worker, no data moved);
        2. ``merged``: per source group and output range, those buckets joined bucket by bucket (the group's
           data for the range moves here: about 1/N of the shuffle, as much as one output's);
        3. ``piece``: per source group and output, its bucket of the merged range (no data moved); output j
           reads one piece per source group, in source order.

        Tasks: S·R + G·R + G·N for G = ⌈S/⌈√S⌉⌉ source groups and R = ⌈N/⌈√N⌉⌉ output ranges, about 2·S·√N,
        against S·N direct (1,600 × 1,600: 130 k against 2.6 M). Each output depends on G pieces instead of S."""
        per_group = math.isqrt(len(sources) - 1) + 1
        width = math.isqrt(n - 1) + 1
        ranges_name = self.name("ranges", shuffle.id, shuffle.label)
        merged_name = self.name("merged", shuffle.id, shuffle.label)
        piece_name = self.name("piece", shuffle.id, shuffle.label)
        pieces: list[list] = [[] for _ in range(n)]
        for group, first in enumerate(range(0, len(sources), per_group)):
            members = sources[first:first + per_group]
            for lo in range(0, n, width):
                hi = min(n, lo + width)
                ranges = [self.add((ranges_name, first + i, lo), execute.bucket_range, TaskRef(key), slot, lo, hi)
                          for i, (key, slot, _) in enumerate(members)]
                merged = self.add((merged_name, group, lo), execute.merge_buckets, [TaskRef(r) for r in ranges])
                for j in range(lo, hi):
                    pieces[j].append(self.add((piece_name, group, j), execute.pick_bucket, TaskRef(merged), None,
                                               j - lo))
        return pieces

    def side_key(self, pc: PC):
        if pc.id not in self._side:
            producer = self.plan.producer.get(pc.id)
            key = self.name("side", producer.id if producer else pc.id, pc.label)
            self._side[pc.id] = self.add(key, execute.concat, [TaskRef(k) for k in self.parts(pc)])
        return self._side[pc.id]

    # stages --------------------------------------------------------------------------------------------
    def emit_stage(self, stage: Stage) -> None:
        if stage.id in self._stage_keys:
            return
        plan = self.plan
        root = stage.nodes[0]
        source = root.ins[0]
        index_of = {n.id: k for k, n in enumerate(stage.nodes)}
        slots: list[Slot] = []
        slot_of: dict[int, int] = {}
        ops = []
        sides: dict[str, Any] = {}
        for n in stage.nodes:
            outputs = {}
            for tag, out in n.outs.items():
                use = plan.sole_usage(out)
                uses = plan.usages.get(out.id, [])
                if use is not None and use[1] == "main" and use[0].id in index_of and use[0] is not n:
                    outputs[tag] = ("op", index_of[use[0].id])
                elif not uses:
                    outputs[tag] = ("drop",)
                else:
                    if plan.fused_map_side(out):
                        slots.append(self.source_map_side(out))
                    else:
                        slots.append(Slot("list"))
                    slot_of[out.id] = len(slots) - 1
                    outputs[tag] = ("slot", len(slots) - 1)
            side_specs = []
            for side, view_class, view_options in n.sides:
                key = self.side_key(side)
                name = key if isinstance(key, str) else repr(key)
                sides[name] = TaskRef(key)
                side_specs.append((name, view_class, view_options))
            ops.append(OpSpec(f"{n.id}", n.label, n.kind, n.payload, side_specs, n.windowing, outputs))
        root_key_coder = root_tags = None
        source_producer = plan.producer.get(source.id)
        if plan.fused_reduce_side(source):
            shuffle = source_producer
            pieces = self.pieces(shuffle)
            if shuffle.kind == "gbk":
                roots = [("group", self.piece_refs(pieces[j])) for j in range(self.buckets(shuffle))]
                root_key_coder, root_tags = shuffle.key_coder, shuffle.tags
            else:
                roots = [("concat", self.piece_refs(pieces[j])) for j in range(self.buckets(shuffle))]
        elif source_producer is not None and source_producer.kind == "impulse" and plan.sole_usage(source):
            roots = [("impulse",)]
        else:
            roots = [("list", TaskRef(k)) for k in self.parts(source)]
        stage_plan = StagePlan(_slug(root.label), ops, slots, root_key_coder, root_tags)
        plan_key = self.name("plan", root.id, root.label)
        self.graph[plan_key] = DataNode(plan_key, pickler.dumps(stage_plan))
        name = self.name("stage", root.id, root.label)
        keys = []
        for i, root_spec in enumerate(roots):
            key = self.add((name, i), execute.run_stage, self.job, stage.id, TaskRef(plan_key), i, root_spec, sides)
            keys.append(key)
            self.stage_keys.append(key)
        self.stage_tasks += len(keys)
        self._stage_keys[stage.id] = keys
        self._stage_slots[stage.id] = slot_of

    def emit_all(self) -> None:
        for stage in self.plan.stages:
            self.emit_stage(stage)
        # PCollections that nobody consumes and no stage produces (e.g. a final GroupByKey): still computed
        for n in self.plan.nodes:
            if n.kind in _OPS:
                continue
            for out in n.outs.values():
                if not self.plan.usages.get(out.id):
                    name = self.name("count", n.id, out.label)
                    for i, part in enumerate(self.parts(out)):
                        self.terminal_keys.append(self.add((name, i), execute.count, TaskRef(part)))


@dataclass
class Translation:
    graph: dict
    stage_keys: list
    terminal_keys: list
    stages: int
    stage_tasks: int
    tasks: int


def translate(plan: Plan, job_id: str, partitions: int, options: dict | None,
              staged_above: int = STAGED_SHUFFLE_ABOVE, whole_sources: bool = False) -> Translation:
    """The plan as one Dask graph; a shuffle with more than ``staged_above`` source × output pairs goes in two
    rounds; with ``whole_sources`` (a small job) every shuffle's reducers read their sources' whole outputs."""
    emitter = Emitter(plan, job_id, partitions, options, staged_above, whole_sources)
    emitter.emit_all()
    return Translation(emitter.graph, emitter.stage_keys, emitter.terminal_keys, len(plan.stages),
                       emitter.stage_tasks, len(emitter.graph))


def plan_pipeline(pipeline: beam.Pipeline) -> Plan:
    """Validate and fuse; raises ``UnsupportedPipeline`` for anything this runner cannot execute."""
    nodes, keepalive = build_ir(pipeline)
    return Plan(nodes, keepalive)
