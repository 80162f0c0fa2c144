"""Conformance of the project's Beam runner for dask.distributed (beam_dask/), element for element against
the FnApiRunner on the same pipeline, on a 2-worker LocalCluster (one thread per worker).

Every case builds the same pipeline twice (``build(p, out_dir)``), runs it on the FnApiRunner and on the
Dask runner, and compares what each output captured — as multisets of elements — plus any files written.
The dask extra is required: the Makefile installs it for ``make test``.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import pickle
import signal
import uuid
from collections import Counter
from pathlib import Path

import apache_beam as beam
import distributed  # noqa: F401  (the [dask] extra is required, not optional, for this suite)
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms import userstate
from apache_beam.transforms.window import FixedWindows, TimestampedValue

import beam_dask
from beam_dask import UnsupportedPipeline, make_dask_pipeline
from beam_dask.runner import DaskRunner

N = 200


@pytest.fixture(scope="module")
def dask_cluster():
    cluster = beam_dask.shared_local_cluster(2)
    cluster.wait_for_workers(2)
    yield cluster


# -- capture: every element of a PCollection, written by the workers into a folder ----------------------------

class _CaptureFn(beam.DoFn):
    """Writes the elements of each bundle into its own pickle file (workers share this machine's disk)."""

    def __init__(self, folder: str):
        self.folder = folder

    def start_bundle(self):
        self.items = []

    def process(self, element):
        self.items.append(element)

    def finish_bundle(self):
        if self.items:
            os.makedirs(self.folder, exist_ok=True)
            tmp = os.path.join(self.folder, f".{uuid.uuid4().hex}")
            with open(tmp, "wb") as fh:
                pickle.dump(self.items, fh)
            os.replace(tmp, os.path.join(self.folder, f"{uuid.uuid4().hex}.pkl"))


class _IdempotentCaptureFn(_CaptureFn):
    """Names each bundle's file by its content, so a bundle that runs again (recomputed after a lost worker)
    replaces its own file: the sink is idempotent, as every sink on a retrying runner must be."""

    def finish_bundle(self):
        if self.items:
            os.makedirs(self.folder, exist_ok=True)
            data = pickle.dumps(sorted(self.items, key=repr))
            tmp = os.path.join(self.folder, f".{uuid.uuid4().hex}")
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, os.path.join(self.folder, hashlib.sha256(data).hexdigest() + ".pkl"))


def capture(pcoll, out_dir: str, name: str, idempotent: bool = False):
    fn = (_IdempotentCaptureFn if idempotent else _CaptureFn)(os.path.join(out_dir, name))
    return pcoll | f"Capture[{name}]" >> beam.ParDo(fn)


def captured(out_dir: Path) -> dict[str, list]:
    result = {}
    for folder in sorted(p for p in Path(out_dir).iterdir() if p.is_dir()):
        items = []
        for path in sorted(folder.glob("*.pkl")):
            items.extend(pickle.loads(path.read_bytes()))
        result[folder.name] = items
    return result


def multiset(items: list) -> Counter:
    return Counter(repr(_canonical(x)) for x in items)


def _canonical(x):
    if isinstance(x, dict):
        return tuple(sorted((k, _canonical(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_canonical(v) for v in x)
    return x


def run_on(runner: str, build, out_dir: Path, dask_client=None, dask_args=(), input_bytes=0):
    if runner == "fnapi":
        p = beam.Pipeline(runner=FnApiRunner())
    else:
        p = make_dask_pipeline(client=dask_client, extra_args=dask_args, input_bytes=input_bytes)
    build(p, str(out_dir))
    result = p.run()
    state = result.wait_until_finish()
    assert state == "DONE"
    return result


def compare(tmp_path: Path, build, dask_cluster, counters_too: bool = True, dask_args=(), input_bytes=0):
    """Run ``build`` on both runners; assert equal captured multisets; return (fnapi, dask) captures and results.
    ``input_bytes``: the input size the Dask runner is told (a small one: whole-source shuffles)."""
    ref_dir, dask_dir = tmp_path / "fnapi", tmp_path / "dask"
    ref_dir.mkdir()
    dask_dir.mkdir()
    ref_result = run_on("fnapi", build, ref_dir)
    dask_result = run_on("dask", build, dask_dir, dask_cluster.client, dask_args, input_bytes)
    ref, got = captured(ref_dir), captured(dask_dir)
    assert set(ref) == set(got)
    for name in ref:
        assert multiset(got[name]) == multiset(ref[name]), f"output {name!r} differs from the FnApiRunner"
    if counters_too:
        assert counters_of(dask_result) == counters_of(ref_result)
    return ref, got, ref_result, dask_result


def counters_of(result) -> dict:
    out = {}
    for c in result.metrics().query(MetricsFilter())["counters"]:
        key = (c.key.metric.namespace, c.key.metric.name)
        out[key] = out.get(key, 0) + (c.committed if c.committed is not None else c.attempted)
    return out


# -- inputs ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    lines = [f"line {i} " + "word " * (i % 7) for i in range(N)]
    (folder / "a.txt").write_text("\n".join(lines[:120]) + "\n")
    with gzip.open(folder / "b.txt.gz", "wt") as fh:
        fh.write("\n".join(lines[120:]) + "\n")
    (folder / "single.txt").write_text("\n".join(lines) + "\n")
    table = pa.table({"id": list(range(N)), "name": [f"n{i % 13}" for i in range(N)],
                      "score": [i / 7 for i in range(N)]})
    pq.write_table(table.slice(0, 90), folder / "part-0.parquet", row_group_size=32)
    pq.write_table(table.slice(90), folder / "part-1.parquet", row_group_size=32)
    return {"dir": folder, "lines": lines, "rows": table.to_pylist()}


# -- cases -----------------------------------------------------------------------------------------------

def test_file_reads_text_and_gzip(tmp_path, inputs, dask_cluster):
    def build(p, out):
        capture(p | "Plain" >> beam.io.ReadFromText(str(inputs["dir"] / "a.txt")), out, "plain")
        capture(p | "Glob" >> beam.io.ReadFromText(str(inputs["dir"] / "*.txt*")), out, "glob")

    ref, got, _, _ = compare(tmp_path, build, dask_cluster)
    assert len(got["plain"]) == 120
    assert sorted(got["glob"]) == sorted(inputs["lines"] + inputs["lines"])  # a.txt + b.txt.gz + single.txt


def test_read_from_parquet(tmp_path, inputs, dask_cluster):
    def build(p, out):
        rows = p | beam.io.ReadFromParquet(str(inputs["dir"] / "part-*.parquet"))
        capture(rows, out, "rows")
        capture(p | "Cols" >> beam.io.ReadFromParquet(str(inputs["dir"] / "part-1.parquet"), columns=["id"]),
                out, "ids")

    ref, got, _, _ = compare(tmp_path, build, dask_cluster)
    assert multiset(got["rows"]) == multiset(inputs["rows"])
    assert sorted(r["id"] for r in got["ids"]) == list(range(90, N))


class _Route(beam.DoFn):
    def process(self, x):
        if x % 3 == 0:
            yield beam.pvalue.TaggedOutput("three", x)
        elif x % 3 == 1:
            yield beam.pvalue.TaggedOutput("one", (x, "one"))
        else:
            yield x


def test_tagged_outputs_receive_only_their_elements(tmp_path, dask_cluster):
    def build(p, out):
        nums = p | beam.Create(list(range(N)))
        outs = nums | beam.ParDo(_Route()).with_outputs("three", "one", main="rest")
        capture(outs.rest, out, "rest")
        capture(outs.three, out, "three")
        capture(outs.one, out, "one")
        parts = nums | beam.Partition(lambda x, n: x % n, 4)
        for i, part in enumerate(parts):
            capture(part, out, f"part{i}")

    _, got, _, _ = compare(tmp_path, build, dask_cluster)
    assert sorted(got["three"]) == [x for x in range(N) if x % 3 == 0]
    assert sorted(got["one"]) == [(x, "one") for x in range(N) if x % 3 == 1]
    assert sorted(got["rest"]) == [x for x in range(N) if x % 3 == 2]
    for i in range(4):
        assert sorted(got[f"part{i}"]) == [x for x in range(N) if x % 4 == i]


def test_every_sink_runs_and_files_are_complete(tmp_path, inputs, dask_cluster):
    def build(p, out):
        lines = p | beam.io.ReadFromText(str(inputs["dir"] / "single.txt"))
        lines | "Upper" >> beam.Map(str.upper) | "W1" >> beam.io.WriteToText(os.path.join(out, "files", "upper"))
        lines | "Len" >> beam.Map(lambda s: str(len(s))) | "W2" >> beam.io.WriteToText(
            os.path.join(out, "files", "len"), num_shards=3)
        (lines | "Rows" >> beam.Map(lambda s: {"line": s})
         | "W3" >> beam.io.WriteToParquet(os.path.join(out, "files", "pq"), pa.schema([("line", pa.string())])))
        capture(lines | "Words" >> beam.FlatMap(str.split), out, "words")

    compare(tmp_path, build, dask_cluster)
    for runner in ("fnapi", "dask"):
        files = tmp_path / runner / "files"
        upper = [l for f in sorted(files.glob("upper-*")) for l in f.read_text().splitlines()]
        assert sorted(upper) == sorted(s.upper() for s in inputs["lines"]), runner
        lens = sorted(files.glob("len-*"))
        assert len(lens) == 3
        assert sorted(l for f in lens for l in f.read_text().splitlines()) == sorted(
            str(len(s)) for s in inputs["lines"])
        rows = [r for f in sorted(files.glob("pq-*")) for r in pq.read_table(f).column("line").to_pylist()]
        assert sorted(rows) == sorted(inputs["lines"])
        assert not list(files.glob("beam-temp-*")), "temporary files left behind"


def test_grouping_and_combining(tmp_path, dask_cluster):
    def build(p, out):
        pairs = p | beam.Create([(f"k{i % 17}", i) for i in range(N)])
        capture(pairs | beam.GroupByKey() | beam.MapTuple(lambda k, vs: (k, sorted(vs))), out, "gbk")
        other = p | "Other" >> beam.Create([(f"k{i % 5}", f"v{i}") for i in range(40)] + [("only-right", "x")])
        joined = {"left": pairs, "right": other} | beam.CoGroupByKey()
        capture(joined | "SortCo" >> beam.MapTuple(
            lambda k, d: (k, sorted(d["left"]), sorted(d["right"]))), out, "cogbk")
        capture(pairs | beam.CombinePerKey(sum), out, "sum_per_key")
        capture(pairs | "MeanPK" >> beam.combiners.Mean.PerKey(), out, "mean_per_key")
        capture(pairs | beam.Values() | "Total" >> beam.CombineGlobally(sum), out, "sum_global")
        capture(pairs | beam.Keys() | beam.combiners.Count.PerElement(), out, "count_per_element")
        empty = p | "Empty" >> beam.Create([]).with_output_types(int)
        capture(empty | "EmptySum" >> beam.CombineGlobally(sum), out, "sum_of_empty")
        capture(pairs | "Top" >> beam.combiners.Top.Of(5, key=lambda kv: kv[1]), out, "top")

    _, got, _, _ = compare(tmp_path, build, dask_cluster)
    assert got["sum_global"] == [sum(range(N))]
    assert got["sum_of_empty"] == [0]
    assert len(got["gbk"]) == 17 and sum(len(vs) for _, vs in got["gbk"]) == N
    cogbk = {k: (left, right) for k, left, right in got["cogbk"]}
    assert cogbk["only-right"] == ([], ["x"]) and len(cogbk["k3"][0]) == len(range(3, N, 17))


class _Scale(beam.DoFn):
    def process(self, x, factor, table, everything, items):
        yield (x * factor, table.get(x % 10), len(everything), sum(1 for _ in items))


def test_side_inputs_including_one_from_the_main_inputs_upstream(tmp_path, dask_cluster):
    def build(p, out):
        nums = p | beam.Create(list(range(100)))
        count = nums | "Count" >> beam.combiners.Count.Globally()  # from the main input's own upstream
        table = p | "Table" >> beam.Create([(i, f"t{i}") for i in range(10)])
        listed = p | "Listed" >> beam.Create(["a", "b", "c"])
        capture(nums | "WithCount" >> beam.Map(lambda x, n: (x, n), n=beam.pvalue.AsSingleton(count)), out, "count")
        capture(nums | "All" >> beam.ParDo(_Scale(), beam.pvalue.AsSingleton(count),
                                           table=beam.pvalue.AsDict(table), everything=beam.pvalue.AsList(nums),
                                           items=beam.pvalue.AsIter(listed)), out, "all")
        empty = p | "Empty" >> beam.Create([]).with_output_types(int)
        capture(listed | "Default" >> beam.Map(lambda s, d: (s, d), d=beam.pvalue.AsSingleton(empty, default_value=-1)),
                out, "default")

    _, got, _, _ = compare(tmp_path, build, dask_cluster)
    assert {n for _, n in got["count"]} == {100}  # computed once, not once per consuming task
    assert sorted(got["all"])[5] == (5 * 100, "t5", 100, 3)
    assert sorted(got["default"]) == [("a", -1), ("b", -1), ("c", -1)]


def test_flatten(tmp_path, dask_cluster):
    def build(p, out):
        a = p | "A" >> beam.Create(list(range(50)))
        b = p | "B" >> beam.Create(list(range(100, 130)))
        capture((a, b) | "AB" >> beam.Flatten(), out, "ab")
        capture((a, a, b) | "AAB" >> beam.Flatten(), out, "aab")
        capture((b,) | "OnlyB" >> beam.Flatten() | beam.Map(lambda x: x + 1), out, "b1")

    _, got, _, _ = compare(tmp_path, build, dask_cluster)
    assert len(got["aab"]) == 130


def _join_cases(p, out):
    left = p | "Left" >> beam.Create([(f"k{i % 11}", i) for i in range(N)])
    right = p | "Right" >> beam.Create([(f"k{i % 7}", f"v{i}") for i in range(60)])
    joined = {"left": left, "right": right} | "Join" >> beam.CoGroupByKey()
    capture(joined | "SortJoin" >> beam.MapTuple(lambda k, d: (k, sorted(d["left"]), sorted(d["right"]))), out,
            "cogbk")
    return left, right


def test_a_join_pickles_its_inputs_once_into_the_shuffle():
    """A CoGroupByKey is a Flatten of tagged inputs into one GroupByKey: each input's map side is fused into the
    stage producing it (its buckets filled there), so no split task re-reads a stage's output."""
    from beam_dask.translate import plan_pipeline, translate

    p = beam.Pipeline()
    _join_cases(p, "/nonexistent")
    graph = translate(plan_pipeline(p), "job", 4, None).graph
    names = [key[0] if isinstance(key, tuple) else key for key in graph]
    assert any(name.startswith("beam-bucket") and "Join" in name for name in names)
    assert not [name for name in names if name.startswith("beam-split")]


def _shuffles_through_flattens(p, out):
    left, right = _join_cases(p, out)
    grouped = left | "GroupLeft" >> beam.GroupByKey() | "Sizes" >> beam.MapTuple(lambda k, vs: (k, len(vs)))
    again = left | "Again" >> beam.Map(lambda kv: (kv[0], -kv[1]))
    inner = (again, right) | "Inner" >> beam.Flatten()
    capture(inner | "InnerCount" >> beam.combiners.Count.Globally(), out, "inner_read_elsewhere")
    mixed = (grouped, left, left, inner) | "Mixed" >> beam.Flatten()
    capture(mixed | "GroupMixed" >> beam.GroupByKey()
            | "SortMixed" >> beam.MapTuple(lambda k, vs: (k, sorted(map(str, vs)))), out, "mixed")
    capture((again, right) | "Dealt" >> beam.Flatten() | beam.Reshuffle(), out, "reshuffled")


# A direct shuffle (a pick task per source and output), a staged one (two rounds) and a small job's whole-source one
# (no pick tasks: an input of 1,000 bytes, at most --dask_whole_source_shuffle_max_bytes)
SHUFFLE_FORMS = pytest.mark.parametrize("dask_args, input_bytes", [
    ((), 0), (("--dask_staged_shuffle_above=0", "--dask_partitions=7"), 0), (("--dask_partitions=7",), 1000)],
    ids=["direct", "staged", "whole_sources"])


@SHUFFLE_FORMS
def test_shuffles_through_flattens_equal_the_fnapi_runner(tmp_path, dask_cluster, dask_args, input_bytes):
    """Fused and unfused inputs of one shuffle (a stage's output, a grouped output, the same input twice, a
    nested Flatten, one that is read elsewhere too) meet in the same groups as on Beam's own runner; so they do
    when every shuffle goes in two rounds (7 outputs: ranges of 3, 3 and 1 buckets), and when each reducer picks
    its buckets from whole sources."""
    _, got, _, result = compare(tmp_path, _shuffles_through_flattens, dask_cluster, dask_args=dask_args,
                                input_bytes=input_bytes)
    assert len(got["cogbk"]) == 11 and got["inner_read_elsewhere"] == [N + 60]
    assert len(got["reshuffled"]) == N + 60


def _cogroup_cases(p, out):
    left = p | "Left" >> beam.Create([(f"k{i % 11}", i) for i in range(N)])
    right = p | "Right" >> beam.Create([(f"k{i % 7}", f"v{i}") for i in range(60)])
    mapped = left | "Mapped" >> beam.Map(lambda kv: (kv[0], kv[1] * 2))
    capture(left | "LeftCount" >> beam.combiners.Count.Globally(), out, "left_read_elsewhere")
    empty = p | "Empty" >> beam.Create([]).with_output_types(tuple[str, int])
    nested = (right, mapped) | "Nested" >> beam.Flatten()
    three = {"left": left, "right": right, "mapped": mapped, "none": empty, "nested": nested} | "Five" >> beam.CoGroupByKey()
    capture(three | "SortFive" >> beam.MapTuple(lambda k, d: (k, {t: sorted(map(str, vs)) for t, vs in d.items()})),
            out, "five")
    odd_tags = {1: left, ("a", 2): right} | "OddTags" >> beam.CoGroupByKey()  # tags Beam maps onto strings and back
    capture(odd_tags | "SortOdd" >> beam.MapTuple(lambda k, d: (k, sorted(d[1]), sorted(d[("a", 2)]))), out, "odd")
    as_tuple = (left, left, right) | "Tuple" >> beam.CoGroupByKey()  # one input twice, as a tuple
    capture(as_tuple | "SortTuple" >> beam.MapTuple(lambda k, vs: (k, tuple(sorted(map(str, v)) for v in vs))),
            out, "tuple")


@SHUFFLE_FORMS
def test_a_cogroupbykey_is_one_grouping_with_beams_groups(tmp_path, dask_cluster, dask_args, input_bytes):
    """CoGroupByKey runs as one GroupByKey whose buckets carry each value's input (no tagging or collecting
    DoFn): every form of its inputs (a dict, other tags than short strings, a tuple, an input twice, an empty
    one, one read elsewhere too, a Flatten) gives Beam's own runner's groups, every tag present in each."""
    from beam_dask.translate import plan_pipeline

    p = beam.Pipeline()
    _cogroup_cases(p, "/nonexistent")
    labels = [n.label for n in plan_pipeline(p).nodes]
    assert not [label for label in labels if "Tag[" in label or "collect_values" in label]
    _, got, _, _ = compare(tmp_path, _cogroup_cases, dask_cluster, dask_args=dask_args, input_bytes=input_bytes)
    five = dict(got["five"])
    assert len(five) == 11 and set(five["k3"]) == {"left", "right", "mapped", "none", "nested"}
    assert five["k3"]["none"] == [] and five["k10"]["right"] == []
    assert {k for k, *_ in got["odd"]} == {f"k{i}" for i in range(11)}


def test_a_shuffle_of_many_partitions_goes_in_two_rounds_of_fewer_tasks():
    """64 sources into 64 outputs: 4,096 pick tasks direct; staged, each source's 8 ranges of 8 buckets (512),
    8 × 8 merges and 8 pieces per output (512). At the default threshold 16 × 16 stays direct, 17 × 17 not."""
    from beam_dask.translate import STAGED_SHUFFLE_ABOVE, plan_pipeline, translate

    def graph(parts: int, staged_above: int):
        p = beam.Pipeline()
        (p | beam.Create(range(10)) | beam.Reshuffle() | beam.Map(lambda x: (x % 3, x))
         | "Group" >> beam.GroupByKey() | beam.Map(len))
        return translate(plan_pipeline(p), "job", parts, None, staged_above).graph

    def group_picks(tasks):
        names = [key[0] for key in tasks if isinstance(key, tuple) and "Group" in key[0]]
        return Counter(name.split("-")[1] for name in names)

    assert STAGED_SHUFFLE_ABOVE == 16 * 16
    assert group_picks(graph(64, 1 << 40)) == Counter({"bucket0": 4096})
    assert group_picks(graph(64, 0)) == Counter({"ranges": 512, "merged": 64, "piece": 512})
    assert group_picks(graph(16, STAGED_SHUFFLE_ABOVE)) == Counter({"bucket0": 256})
    staged = group_picks(graph(17, STAGED_SHUFFLE_ABOVE))  # 4 groups of up to 5 sources, 4 ranges of up to 5
    assert staged == Counter({"ranges": 17 * 4, "merged": 4 * 4, "piece": 4 * 17})


def test_a_small_jobs_shuffle_has_no_pick_tasks_and_the_runner_decides_by_the_input_size(dask_cluster):
    """Whole sources: no bucket task of any kind, each reducer depends on its sources' whole outputs (the job
    is one scheduling round trip per shuffle shorter). The runner chooses it for a known input of at most
    --dask_whole_source_shuffle_max_bytes (default one partition's 8 MB), never for an unknown one."""
    from beam_dask.runner import PARTITION_INPUT_BYTES
    from beam_dask.translate import plan_pipeline, translate

    def build(p):
        (p | beam.Create(range(10)) | beam.Reshuffle() | beam.Map(lambda x: (x % 3, x))
         | "Group" >> beam.GroupByKey() | beam.Map(len))

    def task_kinds(whole_sources: bool) -> Counter:
        p = beam.Pipeline()
        build(p)
        graph = translate(plan_pipeline(p), "job", 5, None, whole_sources=whole_sources).graph
        return Counter(key[0].split("-")[1] for key in graph if isinstance(key, tuple))

    direct, whole = task_kinds(False), task_kinds(True)
    assert sum(n for kind, n in direct.items() if kind.startswith("bucket")) >= 5 * 5  # the GroupByKey's alone
    assert not [kind for kind in whole if kind.startswith(("bucket", "ranges", "merged", "piece"))], whole
    assert whole["stage"] == direct["stage"]

    seen = []
    real_translate = beam_dask.runner.translate

    def spy(*args):
        seen.append(args[-1])
        return real_translate(*args)

    beam_dask.runner.translate = spy
    try:
        for input_bytes, args in ((0, ()), (1000, ()), (PARTITION_INPUT_BYTES, ()), (PARTITION_INPUT_BYTES + 1, ()),
                                  (1000, ("--dask_whole_source_shuffle_max_bytes=0",))):
            p = make_dask_pipeline(client=dask_cluster.client, extra_args=args, input_bytes=input_bytes)
            build(p)
            assert p.run().wait_until_finish() == "DONE"
    finally:
        beam_dask.runner.translate = real_translate
    assert seen == [False, True, True, False, False]


def test_the_staged_shuffle_threshold_is_a_whole_number_not_below_zero(capsys):
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_dask.runner import DaskRunnerOptions

    assert PipelineOptions(["--dask_staged_shuffle_above=0"]).view_as(DaskRunnerOptions).dask_staged_shuffle_above == 0
    for bad, said in (("-1", "must be >= 0, got -1"), ("many", "expected a whole number, got 'many'")):
        with pytest.raises(SystemExit):
            PipelineOptions([f"--dask_staged_shuffle_above={bad}"]).view_as(DaskRunnerOptions)
        assert f"argument --dask_staged_shuffle_above: {said}" in capsys.readouterr().err


def test_a_staged_shuffle_keeps_each_groups_values_in_the_direct_shuffles_order(tmp_path, dask_cluster):
    """Values of a group arrive in source order either way: the staged rounds join buckets in source order."""
    def build(p, out):
        values = p | beam.Create(list(range(3 * N))) | beam.Reshuffle()
        capture(values | beam.Map(lambda x: (x % 13, x)) | "Group" >> beam.GroupByKey()
                | beam.MapTuple(lambda k, vs: (k, list(vs))), out, "groups")

    got = {}
    for way, args in (("direct", ("--dask_partitions=6",)),
                      ("staged", ("--dask_partitions=6", "--dask_staged_shuffle_above=0"))):
        (tmp_path / way).mkdir()
        run_on("dask", build, tmp_path / way, dask_cluster.client, args)
        got[way] = dict(captured(tmp_path / way)["groups"])
    assert len(got["direct"]) == 13 and got["staged"] == got["direct"]


def test_reshuffle_repartitions_a_single_file(tmp_path, inputs, dask_cluster):
    def build(p, out):
        lines = p | beam.io.ReadFromText(str(inputs["dir"] / "single.txt"))
        spread = lines | beam.Reshuffle()
        capture(spread, out, "lines")
        capture(spread | "Bundles" >> beam.ParDo(_BundlesOnly()), out, "bundles")

    ref_dir, dask_dir = tmp_path / "fnapi", tmp_path / "dask"
    ref_dir.mkdir(), dask_dir.mkdir()
    run_on("fnapi", build, ref_dir)
    run_on("dask", build, dask_dir, dask_cluster.client)
    ref, got = captured(ref_dir), captured(dask_dir)
    assert multiset(got["lines"]) == multiset(ref["lines"]) == multiset(inputs["lines"])
    sizes = [n for _, n in got["bundles"]]
    assert sum(sizes) == N
    assert len(sizes) > 1, "the single file's lines stayed in one partition after Reshuffle"
    assert max(sizes) <= N // 2 + 1


class _BundlesOnly(beam.DoFn):
    def start_bundle(self):
        self.n, self.bundle = 0, uuid.uuid4().hex

    def process(self, x):
        self.n += 1

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindow
        from apache_beam.utils.windowed_value import WindowedValue

        if self.n:
            yield WindowedValue((self.bundle, self.n), 0, [GlobalWindow()])


class _Counting(beam.DoFn):
    def __init__(self):
        self.seen = Metrics.counter("conf", "seen")
        self.odd = Metrics.counter("conf", "odd")
        self.bundles = Metrics.counter("conf", "bundle_elements")
        self.sizes = Metrics.distribution("conf", "size")

    def start_bundle(self):
        self.n = 0

    def process(self, x):
        self.seen.inc()
        self.n += 1
        self.sizes.update(x % 10)
        if x % 2:
            self.odd.inc(2)
        yield x

    def finish_bundle(self):
        self.bundles.inc(self.n)  # a counter updated in finish_bundle


def test_counters_are_exact(tmp_path, dask_cluster):
    def build(p, out):
        nums = p | beam.Create(list(range(N)))
        counted = nums | "C1" >> beam.ParDo(_Counting()) | "Sq" >> beam.Map(lambda x: x * x)
        again = counted | "Spread" >> beam.Reshuffle() | "C2" >> beam.ParDo(_Counting())
        capture(again, out, "again")

    _, _, ref_result, dask_result = compare(tmp_path, build, dask_cluster)
    counters = counters_of(dask_result)
    assert counters[("conf", "seen")] == 2 * N
    assert counters[("conf", "bundle_elements")] == 2 * N
    assert counters[("conf", "odd")] == 2 * (N // 2 + N // 2)  # x odd in C1, x*x odd in C2
    per_step = {c.key.step: c.committed for c in dask_result.metrics().query(
        MetricsFilter().with_name("seen"))["counters"]}
    assert per_step == {"C1": N, "C2": N}

    def dists(result):
        return {c.key.step: (c.committed.count, c.committed.sum, c.committed.min, c.committed.max)
                for c in result.metrics().query(MetricsFilter())["distributions"]}
    assert dists(dask_result) == dists(ref_result)


class _SetupOnce(beam.DoFn):
    def __init__(self, folder):
        self.folder = folder

    def setup(self):
        Path(self.folder, f"setup-{os.getpid()}-{uuid.uuid4().hex}").touch()

    def process(self, x):
        yield x, os.getpid()

    def teardown(self):
        Path(self.folder, f"teardown-{os.getpid()}-{uuid.uuid4().hex}").touch()


def test_setup_runs_once_per_worker_process(tmp_path, dask_cluster):
    marks = tmp_path / "marks"
    marks.mkdir()
    p = make_dask_pipeline(client=dask_cluster.client, partitions=8)
    nums = p | beam.Create(list(range(N)))
    out = nums | beam.Reshuffle() | beam.ParDo(_SetupOnce(str(marks)))  # 8 partitions → 8 tasks of this DoFn
    capture(out, str(tmp_path / "cap"), "pids")
    result = p.run()
    assert result.wait_until_finish() == "DONE"
    pids = {pid for _, pid in captured(tmp_path / "cap")["pids"]}
    setups = Counter(name.split("-")[1] for name in os.listdir(marks) if name.startswith("setup-"))
    assert set(setups) == {str(pid) for pid in pids}
    assert all(n == 1 for n in setups.values()), setups  # reused across the worker's tasks
    teardowns = Counter(name.split("-")[1] for name in os.listdir(marks) if name.startswith("teardown-"))
    assert teardowns == setups  # torn down when the job ended


class _FixedWindowed(beam.DoFn):
    def process(self, x):
        yield TimestampedValue(x, x)


class _Stateful(beam.DoFn):
    STATE = userstate.CombiningValueStateSpec("total", sum)

    def process(self, kv, total=beam.DoFn.StateParam(STATE)):
        total.add(kv[1])
        yield kv


class _Touch(beam.DoFn):
    def __init__(self, path):
        self.path = path

    def process(self, x):
        Path(self.path).touch()
        yield x


@pytest.mark.parametrize("case", ["fixed_windows", "stateful", "unbounded"])
def test_unsupported_constructs_fail_at_translation(tmp_path, dask_cluster, case):
    touched = tmp_path / "ran"
    p = make_dask_pipeline(client=dask_cluster.client)
    nums = p | beam.Create(list(range(10))) | beam.ParDo(_Touch(str(touched)))
    if case == "fixed_windows":
        (nums | beam.ParDo(_FixedWindowed()) | beam.WindowInto(FixedWindows(5)) | beam.Map(lambda x: (x % 2, x))
         | beam.GroupByKey())
        expected = "FixedWindows"
    elif case == "stateful":
        nums | beam.Map(lambda x: (x % 2, x)) | beam.ParDo(_Stateful())
        expected = "state or timers"
    else:
        from apache_beam.testing.test_stream import TestStream
        p | TestStream().add_elements([1, 2]) | beam.Map(lambda x: x)
        expected = "unbounded"
    with pytest.raises(UnsupportedPipeline, match=expected):
        p.run()
    assert not touched.exists(), "work started although the pipeline cannot be translated"


def _fail_on_13(x):
    if x == 13:
        raise ValueError("thirteen is not allowed")
    return x


def test_a_failing_dofn_fails_the_pipeline(dask_cluster):
    p = make_dask_pipeline(client=dask_cluster.client)
    p | beam.Create(list(range(50))) | beam.Map(_fail_on_13)
    result = p.run()
    with pytest.raises(ValueError, match="thirteen"):
        result.wait_until_finish()
    assert result.state == "FAILED"


class _DieOnce(beam.DoFn):
    """Counts every element, and SIGKILLs its own worker process in the middle of its first bundle that
    holds element 37 (once per test: a marker file says it happened)."""

    def __init__(self, marker):
        self.marker = marker
        self.seen = Metrics.counter("die", "seen")

    def process(self, x):
        self.seen.inc()
        if x == 37 and not os.path.exists(self.marker):
            Path(self.marker).write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        yield x * 2


def test_counters_of_a_killed_attempt_are_not_counted(tmp_path, dask_cluster):
    """The attempt that was killed had counted some elements; only the rescheduled attempt's counts count."""
    marker = tmp_path / "died"
    p = make_dask_pipeline(client=dask_cluster.client, partitions=4)
    doubled = p | beam.Create(list(range(N))) | beam.Reshuffle() | beam.ParDo(_DieOnce(str(marker)))
    capture(doubled, str(tmp_path / "cap"), "doubled", idempotent=True)
    result = p.run()
    assert result.wait_until_finish() == "DONE"
    assert marker.exists(), "the worker was not killed: the test did not test anything"
    got = [x for x in captured(tmp_path / "cap")["doubled"]]
    assert sorted(got) == [2 * x for x in range(N)]
    assert counters_of(result)[("die", "seen")] == N
    dask_cluster.wait_for_workers(2)


def test_runner_by_name_with_options(tmp_path, dask_cluster):
    """``--runner=beam_dask.DaskRunner --dask_address=…``: how beam_options.make_pipeline can select it."""
    from apache_beam.options.pipeline_options import PipelineOptions

    p = beam.Pipeline(options=PipelineOptions(["--runner=beam_dask.DaskRunner",
                                               f"--dask_address={dask_cluster.address}", "--dask_partitions=3"]))
    assert isinstance(p.runner, DaskRunner)
    capture(p | beam.Create(list(range(30))) | beam.Map(lambda x: -x), str(tmp_path / "cap"), "neg")
    result = p.run()
    assert result.wait_until_finish() == "DONE"
    assert sorted(captured(tmp_path / "cap")["neg"]) == sorted(-x for x in range(30))


def test_the_config_and_the_cli_reach_the_dask_runner(tmp_path):
    """`runner.name: dask` (with or without `dask_address`) builds a pipeline on the project's Dask runner;
    an address without that runner is refused by name; `--runner dask --dask-address` sets both keys."""
    import argparse

    from cli.prepare import add_run_options, load_with_cli
    from beamio.beam_options import make_pipeline
    from pipelines.config import ConfigError, load_config

    config = tmp_path / "c.yaml"
    config.write_text(f"name: d\ninput: {{paths: [{tmp_path / 'in.jsonl'}]}}\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    add_run_options(parser)
    cfg = load_with_cli(parser.parse_args([str(config), "--runner", "dask", "--dask-address", "tcp://10.1.2.3:8786"]),
                        [])
    assert (cfg.runner.name, cfg.runner.dask_address) == ("dask", "tcp://10.1.2.3:8786")
    pipeline = make_pipeline(cfg.runner.name, cfg.runner.workers, cfg.runner.options, cfg.runner.dask_address)
    assert isinstance(pipeline.runner, DaskRunner)  # (it connects when the pipeline runs)
    with pytest.raises(ConfigError, match="runner: .*dask_address is set but name is 'direct'"):
        load_config(config, ["runner.dask_address=tcp://10.1.2.3:8786"])


def test_a_refresh_with_nothing_new_on_dask_exits_0_with_a_complete_manifest(dask_cluster, tmp_path, capsys):
    """On the Dask runner, through the CLI: a base run, then a refresh whose every input was seen by it, and
    one whose every new document is a copy of the base's: both exit 0 with a complete, balanced manifest."""
    import json

    import yaml

    from cli.main import main

    corpus = Path(__file__).resolve().parents[1] / "data" / "demo" / "corpus.jsonl.gz"
    with gzip.open(corpus, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for _, line in zip(range(40), fh)]
    base_file, copies = tmp_path / "base" / "old.jsonl", tmp_path / "new" / "copies.jsonl"
    for path, rows in ((base_file, records), (copies, [dict(r, url=f"{r.get('url', '')}?copy") for r in records])):
        path.parent.mkdir()
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")

    def config(name: str, *paths: Path) -> str:
        data = {"name": name, "input": {"paths": [str(p) for p in paths]}, "output": {"runs_dir": str(tmp_path / "runs")},
                "quality": {"enabled": False}, "pii": {"enabled": False}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
        return str(tmp_path / f"{name}.yaml")

    dask = ["--runner", "dask", "--dask-address", dask_cluster.address]
    assert main(["prepare", config("base", base_file), *dask]) == 0, capsys.readouterr().err
    base = tmp_path / "runs" / "base"
    kept = json.loads((base / "manifest.json").read_text())["counts"]["kept"]
    assert kept > 0
    for name, paths, read in (("seen", (base_file,), 0), ("copies", (base_file, copies), len(records))):
        assert main(["refresh", config(name, *paths), "--against", str(base), *dask]) == 0, capsys.readouterr().err
        manifest = json.loads((tmp_path / "runs" / name / "manifest.json").read_text())
        assert manifest["status"] == "complete" and manifest["empty"] is True, manifest
        assert manifest["runner"]["name"] == "dask"
        assert manifest["counts"]["read"] == read and manifest["counts"]["kept"] == 0 and manifest["counts"]["balanced"]
    out = capsys.readouterr().out
    assert "reading 0 new" in out and out.count("done: empty result") == 2


def test_the_dedup_command_runs_on_dask_with_the_local_runners_clusters(dask_cluster, tmp_path, capsys):
    """`corpusmill dedup --runner dask --dask-address ...` on both near-dedup paths (the shuffle path, its
    shuffles direct or staged, and the in-memory one on a worker) writes the clusters of the local in-memory path, line for line (sorted: the
    Beam paths write in shuffle order), with the same count of quarantined records; the Dask-only options
    are refused by name with another runner."""
    import json

    from cli.main import main

    corpus = Path(__file__).resolve().parents[1] / "data" / "demo" / "corpus.jsonl.gz"
    with gzip.open(corpus, "rt", encoding="utf-8") as fh:
        texts = [r["text"] for r in map(json.loads, fh) if r["lang"] == "en" and len(r["text"]) > 1500][:30]
    rows = [{"id": f"doc-{i}", "text": t} for i, t in enumerate(texts)]
    rows += [{"id": f"copy-{i}", "text": texts[i].replace(" the ", " a ", 2) + "\n\nShare this page"}
             for i in range(0, 30, 3)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n", encoding="utf-8")

    def clusters(*options: str) -> tuple[list[str], str]:
        out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}.jsonl"
        assert main(["dedup", str(source), "--out", str(out), *options]) == 0, capsys.readouterr().err
        return sorted(out.read_text(encoding="utf-8").splitlines()), capsys.readouterr().err

    reference, ref_log = clusters()
    assert "in-memory path in this process" in ref_log and "1 quarantined" in ref_log
    assert sum('"kept": false' in line for line in reference) == 10  # every edited copy found
    dask = ["--runner", "dask", "--dask-address", dask_cluster.address]
    # (the last: every shuffle of the distributed path in two rounds, as past 16 x 16 partitions)
    for options in (["--set", "near_dedup.mode=beam"], ["--set", "near_dedup.mode=memory"],
                    ["--set", "near_dedup.mode=beam", "--dask_staged_shuffle_above=0"]):
        got, log = clusters(*dask, *options)
        assert got == reference, options
        assert "1 quarantined" in log and "in this process" not in log
    assert main(["dedup", str(source), "--out", str(tmp_path / "x.jsonl"), "--worker-memory", "2GiB"]) == 2
    assert "--worker-memory needs --runner dask" in capsys.readouterr().err


def _mark_in_place(doc: dict) -> dict:
    doc["text"] = "changed by a later stage"  # a DoFn that changes its input (the project's steps annotate so)
    return doc


def test_a_stage_changing_its_input_never_changes_another_stages_view_of_it(tmp_path, dask_cluster):
    """One partition, two consuming stages: the first changes its elements in place, the second runs after it
    (a side input orders them). The second must read the elements as the producing stage emitted them."""

    def build(p, out):
        docs = (p | beam.Create([{"id": i, "text": f"doc {i}"} for i in range(40)])
                | "Spread" >> beam.Reshuffle() | "Fresh" >> beam.Map(dict))
        changed = docs | "ChangeInPlace" >> beam.Map(_mark_in_place)
        done = changed | "CountChanged" >> beam.combiners.Count.Globally()
        later = docs | "ReadAfter" >> beam.Map(lambda d, n: (d["text"], n), n=beam.pvalue.AsSingleton(done))
        capture(later, out, "later")

    # (not compared with the FnApiRunner: Beam leaves a DoFn that changes its input undefined, and there the two
    # branches may share objects inside one fused stage, in either order)
    run_on("dask", build, tmp_path, dask_cluster.client)
    later = captured(tmp_path)["later"]
    assert sorted(later) == sorted((f"doc {i}", 40) for i in range(40)), later[:3]


def test_worker_memory_reaches_the_local_cluster_and_its_data_spills_to_disk(tmp_path):
    """`runner.worker_memory` (refused by name where it cannot apply) becomes each LocalCluster worker's
    memory limit, with spilling on and pause/terminate off; task results beyond the limit's target share go to
    disk instead of staying in the worker's memory."""
    import numpy as np

    from beam_dask.cluster import LocalDaskCluster
    from pipelines.config import ConfigError, load_config

    config = tmp_path / "c.yaml"
    config.write_text(f"name: d\ninput: {{paths: [{tmp_path / 'in.jsonl'}]}}\n", encoding="utf-8")
    assert load_config(config, ["runner.name=dask", "runner.worker_memory=2.5GiB"]).runner.worker_memory == "2.5GiB"
    with pytest.raises(ConfigError, match="runner: .*worker_memory applies to the LocalCluster"):
        load_config(config, ["runner.worker_memory=2GiB"])
    with pytest.raises(ConfigError, match="runner.worker_memory"):
        load_config(config, ["runner.name=dask", "runner.worker_memory=lots"])

    def settings(dask_worker):
        import dask
        return (dask_worker.memory_manager.memory_limit, dask.config.get("distributed.worker.memory.pause"),
                dask.config.get("distributed.worker.memory.terminate"))

    def spilled(dask_worker):
        return len(dask_worker.data.slow) if hasattr(dask_worker.data, "slow") else -1

    with LocalDaskCluster(1, memory_limit="600MiB") as local:
        assert list(local.client.run(settings).values()) == [(600 * 2 ** 20, False, False)]
        blocks = [local.client.submit(np.full, 5 * 2 ** 20, i, dtype=np.float64, pure=False) for i in range(12)]
        firsts = local.client.submit(lambda arrays: [float(a[0]) for a in arrays], blocks)
        assert firsts.result(timeout=120) == [float(i) for i in range(12)]  # read back, from memory or disk
        # 12 × 40 MiB = 480 MiB of results against a 360 MiB target
        assert list(local.client.run(spilled).values())[0] > 0


def _managed_bytes_here(_doc) -> int:
    return distributed.get_worker().state.nbytes


def test_a_worker_counts_the_documents_it_holds_as_managed_memory(tmp_path, dask_cluster):
    """Dask spills a worker's task results only as far as it can measure them: the partitions the runner keeps
    (lists of WindowedValues) must count their documents, not 80 bytes per element (Dask's default for an
    unknown object), or gigabytes of partitions read as 'unmanaged memory' and are never spilled."""
    per_doc = 10_000

    def build(p, out):
        docs = (p | beam.Create(list(range(8))) | "SpreadSeeds" >> beam.Reshuffle()
                | beam.FlatMap(lambda i: [{"id": f"{i}-{j}", "text": "x" * per_doc} for j in range(1000)])
                | "SpreadDocs" >> beam.Reshuffle())  # 80 MB of documents held between two stages
        capture(docs | beam.Map(_managed_bytes_here), out, "managed")

    run_on("dask", build, tmp_path, dask_cluster.client)
    held = max(captured(tmp_path)["managed"])
    # a consuming task has its input partition in memory: at least 1/32 of the 80 MB (at most 32 partitions);
    # counted as 80 bytes per element, the whole 8,000 documents would read as 0.64 MB
    assert held >= 8000 * per_doc / 32, held


def test_partitions_travel_as_their_chunks_and_read_back_as_fresh_objects():
    """Dask serializes a plain list whose first element it knows (a shuffle piece starts with a bytes key) one
    element at a time, a frame per element: what the runner returns goes as its pickled chunks, each one frame
    as it is (not copied into a pickle), between workers and into spill files alike, nested as it was. Reading
    a partition twice gives equal but separate objects (a DoFn changing one changes nothing)."""
    from distributed.protocol import deserialize, deserialize_bytes, serialize, serialize_bytelist

    from beam_dask.execute import Packed, Part

    elements = [(f"key-{i}".encode(), {"id": i, "text": "x" * 50}) for i in range(2000)]
    assert len(serialize(list(elements))[1]) > 2000  # the behaviour being avoided
    packed = Packed.of(elements)
    small = Packed.of(elements[:10])
    header, frames = serialize(Part([Part([packed, Packed()]), small]))
    assert header["serializer"] == "dask"
    assert frames == packed.chunks + small.chunks and all(f is c for f, c in zip(frames, packed.chunks))
    for value in (packed, Part([Part([packed, Packed()]), small])):
        for back in (deserialize(*serialize(value)), deserialize_bytes(b"".join(serialize_bytelist(value)))):
            assert type(back) is type(value)
            if isinstance(value, Packed):
                assert list(back) == elements and len(back) == 2000
            else:
                assert type(back[0]) is Part and [list(p) for p in back[0]] == [elements, []]
                assert list(back[1]) == elements[:10] and len(back[0][0]) == 2000
    first, second = list(packed), list(packed)
    assert first == second == elements and len(packed) == 2000
    first[0][1]["text"] = "changed"
    assert second[0][1]["text"] == "x" * 50 and list(packed)[0][1]["text"] == "x" * 50
    assert list(pickle.loads(pickle.dumps(Packed.joined([packed, packed])))) == elements + elements


def test_shuffle_partitions_grow_with_the_input_so_a_task_share_does_not():
    """Without an input size: 2 per worker thread (2..32); with one, at least one partition per 8 MB of input,
    so a task's share of a shuffle stays bounded as the corpus grows (and the cap holds)."""
    from beam_dask.runner import MAX_PARTITIONS, PARTITION_INPUT_BYTES, default_partitions

    class Threads:
        def __init__(self, n):
            self.n = n

        def nthreads(self):
            return {f"w{i}": 1 for i in range(self.n)}

    assert [default_partitions(Threads(n)) for n in (1, 2, 8, 40)] == [2, 4, 16, 32]
    assert default_partitions(Threads(2), 11 << 20) == 4
    assert default_partitions(Threads(2), 173 << 20) == 22
    share_small = (11 << 20) / default_partitions(Threads(2), 11 << 20)
    share_large = (16 * 11 << 20) / default_partitions(Threads(2), 16 * 11 << 20)
    assert share_large <= PARTITION_INPUT_BYTES < 4 * share_small  # without it: 16 × share_small
    assert default_partitions(Threads(2), 10 ** 13) == MAX_PARTITIONS


def _mapped_bytes_of_a_4mb_array(_=None) -> int:
    """How many bytes glibc maps (rather than takes from its heap) for a 4 MB numpy array made now."""
    import ctypes
    import ctypes.util

    import numpy as np

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                          "fsmblks", "uordblks", "fordblks", "keepcost")]

    mallinfo2 = ctypes.CDLL(ctypes.util.find_library("c")).mallinfo2
    mallinfo2.restype = Mallinfo2
    before = mallinfo2().hblkhd
    array = np.ones(1 << 19)
    mapped = mallinfo2().hblkhd - before
    del array
    return mapped


def test_workers_take_numpy_temporaries_from_the_heap_and_the_driver_is_untouched(tmp_path, dask_cluster):
    """Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_ set, which switches glibc's dynamic mmap threshold
    off: every array above 128 kB would be mapped and faulted in afresh (near-dedup's sketching spent twice its
    time in the kernel). A worker sets the threshold in its own process when it runs its first stage
    (runio.heap)."""
    import subprocess
    import sys

    def build(p, out):
        capture(p | beam.Create([0, 1]) | beam.Reshuffle() | beam.Map(_mapped_bytes_of_a_4mb_array), out, "mapped")

    run_on("dask", build, tmp_path, dask_cluster.client)
    assert captured(tmp_path)["mapped"] == [0, 0]
    # what a process with Dask's variable and no setting of its own does (so the check above can fail) ...
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536", "PYTHONPATH": str(Path(__file__).parent)}
    code = "from test_dask_runner import _mapped_bytes_of_a_4mb_array as f; print(f())"
    assert int(subprocess.check_output([sys.executable, "-c", code], env=env, text=True)) >= 4 << 20
    # ... and the setting never reaches the environment the driver's subprocesses inherit
    assert not any(name.startswith(("MALLOC_MMAP", "MALLOC_TOP")) for name in os.environ)


# -- GroupByKeys whose keys are their partitions ------------------------------------------------------------

def _by_partition(inputs, label: str, parts: int):
    from apache_beam.pipeline import transform_annotations

    from beam_dask.translate import SHUFFLE_PARTITIONS

    with transform_annotations(**{SHUFFLE_PARTITIONS: str(parts)}):
        return inputs | label >> (beam.CoGroupByKey() if isinstance(inputs, dict) else beam.GroupByKey())


def _partitioned_cases(p, out: str):
    blocks = p | "Blocks" >> beam.Create([(i % 5, f"b{i}") for i in range(N)])
    others = p | "Others" >> beam.Create([(i % 5, i) for i in range(40)])
    grouped = _by_partition(blocks | "Spread" >> beam.Reshuffle(), "GroupParts", 5)  # an unfused input (split)
    capture(grouped | "SortParts" >> beam.MapTuple(lambda k, vs: (k, sorted(vs))), out, "parts")
    joined = _by_partition({"a": blocks | "Tag" >> beam.Map(lambda kv: kv), "b": others}, "JoinParts", 5)
    capture(joined | "SortJoin" >> beam.MapTuple(lambda k, d: (k, sorted(d["a"]), sorted(d["b"]))), out, "joined")
    hashed = blocks | "Hashed" >> beam.GroupByKey()  # beside them, an ordinary GroupByKey keeps its own count
    capture(hashed | "SortHashed" >> beam.MapTuple(lambda k, vs: (k, len(vs))), out, "hashed")


def test_a_group_by_partition_gives_beams_groups_with_one_reducer_per_partition(tmp_path, dask_cluster):
    """A GroupByKey annotated shuffle_partitions=N groups into exactly N partitions, key k into partition k (its
    fused and split map sides alike), with the same groups as Beam's own runner; other shuffles keep the
    pipeline's count."""
    from beam_dask.translate import plan_pipeline, translate

    p = beam.Pipeline()
    _partitioned_cases(p, "/nonexistent")
    graph = translate(plan_pipeline(p), "job", 7, None).graph
    reducers = {}
    for key in graph:
        if isinstance(key, tuple) and key[0].startswith(("beam-stage", "beam-reduce")):
            reducers.setdefault(key[0], set()).add(key[1])
    counts = {name.split("-")[3]: len(parts) for name, parts in reducers.items()}  # by the stage's first step
    assert counts["SortParts"] == counts["SortJoin"] == 5
    assert counts["SortHashed"] == 7
    _, got, _, _ = compare(tmp_path, _partitioned_cases, dask_cluster)
    assert len(got["parts"]) == 5 and len(got["joined"]) == 5 and len(got["hashed"]) == 5


def test_a_group_by_partition_refuses_a_key_that_is_not_one(tmp_path, dask_cluster):
    from beam_dask.translate import SHUFFLE_PARTITIONS, UnsupportedPipeline, plan_pipeline

    p = make_dask_pipeline(client=dask_cluster.client)
    _by_partition(p | beam.Create([(0, "a"), (3, "b")]), "GroupParts", 3) | beam.Map(lambda kv: kv)
    result = p.run()
    with pytest.raises(ValueError, match=r"GroupParts.*shuffle_partitions=3.*got the key 3; its keys must be the "
                                         r"ints 0..2"):
        result.wait_until_finish()
    bad = beam.Pipeline()
    _by_partition(bad | beam.Create([(0, "a")]), "Bad", 0)
    with pytest.raises(UnsupportedPipeline, match=f"{SHUFFLE_PARTITIONS}=b'0'"):
        plan_pipeline(bad)


def test_near_dedup_annotates_its_shuffles_with_the_runners_annotation():
    from beam_dask.translate import plan_pipeline
    from transforms.near_dedup.beam import ByPartition

    p = beam.Pipeline()
    p | beam.Create([(0, "a"), (2, "b")]) | "Parts" >> ByPartition(3) | beam.Map(lambda kv: kv)
    assert [n.partitions for n in plan_pipeline(p).nodes if n.kind == "gbk"] == [3]


def test_the_shuffle_workers_are_what_the_runner_will_start_or_the_scheduler_has(dask_cluster):
    from beamio.beam_options import default_workers
    from pipelines.runners import shuffle_workers

    assert shuffle_workers("dask") == beam_dask.cluster.DEFAULT_LOCAL_WORKERS
    assert shuffle_workers("dask", 3) == 3
    assert shuffle_workers("dask", dask_address=dask_cluster.address) == 2  # asked of the scheduler
    assert beam_dask.cluster.cluster_threads("tcp://127.0.0.1:9", timeout="1s") is None  # nobody there: the
    # runner's own connection then says so
    assert shuffle_workers("direct") == default_workers() and shuffle_workers("direct", 4) == 4
    assert shuffle_workers("flink") is None


def test_a_wait_on_the_scheduler_ends_when_the_job_does_not_after_its_timeout():
    """``wait_job`` answers when the last tracked key reaches memory (or one errs), not at its timeout: the
    client learns the end of a job without polling."""
    import asyncio

    from beam_dask import watch

    async def scenario():
        plugin = watch.JobWatch()
        plugin.register("job", "job", ["'a'", "'b'"], [])
        plugin.register("bad", "bad", ["'bad-x'"], [])
        waiting = asyncio.ensure_future(plugin.wait("job", 600))
        failing = asyncio.ensure_future(plugin.wait("bad", 600))
        await asyncio.sleep(0)
        plugin.transition("a", "processing", "memory", worker="w")
        await asyncio.sleep(0)
        assert not waiting.done()  # one key still pending
        plugin.transition("b", "processing", "memory", worker="w")
        plugin.transition("bad-x", "processing", "erred", exception_text="boom")
        done = await asyncio.wait_for(waiting, 30)
        failed = await asyncio.wait_for(failing, 30)
        return done, failed

    done, failed = asyncio.run(scenario())
    assert done == {"known": True, "done": 2, "total": 2, "error": None}
    assert failed["error"]["text"] == "boom" and failed["done"] == 0

    async def times_out():
        plugin = watch.JobWatch()
        plugin.register("slow", "slow", ["'s'"], [])
        return await plugin.wait("slow", 0.05)

    assert asyncio.run(times_out()) == {"known": True, "done": 0, "total": 1, "error": None}
