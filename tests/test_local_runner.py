"""The local runner (beamio/local_runner.py): Beam's FnApiRunner with each stage's input streamed to its worker
processes in bounded messages. Element for element the same as Beam's own runner; the messages are cut only at
element boundaries; a failing bundle fails the run instead of hanging while its input is still being sent."""
from __future__ import annotations

import os
import pickle
import uuid
from collections import Counter
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.coders import coders
from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beamio import local_runner
from beamio.beam_options import make_pipeline


TESTS = Path(__file__).resolve().parent


@pytest.fixture
def workers_import_this_module(monkeypatch):
    """The worker processes unpickle this module's DoFns by reference: they must find it on their path."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), str(TESTS.parent),
                                                                   os.environ.get("PYTHONPATH")])))


def _encode(values, coder) -> bytes:
    out = create_OutputStream()
    for value in values:
        coder.get_impl().encode_to_stream(value, out, True)
    return out.get()


def test_cuts_fall_on_element_boundaries_and_keep_every_element_in_order():
    coder = coders.TupleCoder([coders.StrUtf8Coder(), coders.IterableCoder(coders.BytesCoder())])
    values = [(f"key{i}", [os.urandom(i % 97)] * (i % 13)) for i in range(2000)]
    data = _encode(values, coder)
    limit = 4096
    cuts = local_runner.element_cuts(data, coder.get_impl(), limit)
    assert cuts[0] == 0 and cuts[-1] == len(data) and len(cuts) > 10
    biggest = max(len(_encode([v], coder)) for v in values)
    decoded = []
    for start, end in zip(cuts, cuts[1:]):
        assert 0 < end - start < limit + biggest  # each run ends at the first boundary at or past the limit
        stream = create_InputStream(data[start:end])
        while stream.size() > 0:  # a run decodes on its own: no element is split between two messages
            decoded.append(coder.get_impl().decode_from_stream(stream, True))
    assert decoded == values


def test_data_within_the_limit_is_one_run_and_is_not_decoded():
    class NoDecoding:
        def decode_from_stream(self, *_):
            raise AssertionError("decoded")

    assert local_runner.element_cuts(b"x" * 100, NoDecoding(), 100) == [0, 100]
    assert local_runner.element_cuts(b"", NoDecoding(), 100) == [0, 0]


class _Capture(beam.DoFn):
    def __init__(self, folder: str):
        self.folder = folder

    def start_bundle(self):
        self.items = []

    def process(self, element):
        self.items.append(element)

    def finish_bundle(self):
        if self.items:
            os.makedirs(self.folder, exist_ok=True)
            Path(self.folder, f"{uuid.uuid4().hex}.pkl").write_bytes(pickle.dumps(self.items))


def _captured(folder: Path) -> dict[str, Counter]:
    return {sub.name: Counter(repr(x) for f in sorted(sub.glob("*.pkl")) for x in pickle.loads(f.read_bytes()))
            for sub in sorted(folder.iterdir())}


class _CountingFn(beam.DoFn):
    def __init__(self):
        self.seen = Metrics.counter("local_runner_test", "seen")

    def process(self, element):
        self.seen.inc()
        yield element


def _build(p, out: str):
    texts = p | "Texts" >> beam.Create([f"{i:05d} " + "word " * (i % 50) for i in range(4000)])
    counted = texts | "Count" >> beam.ParDo(_CountingFn())
    keyed = counted | "Key" >> beam.Map(lambda t: (int(t[:5]) % 37, t))
    grouped = keyed | "Group" >> beam.GroupByKey() | "Sorted" >> beam.MapTuple(lambda k, vs: (k, sorted(vs)))
    lengths = keyed | "Lengths" >> beam.MapTuple(lambda k, t: (k, len(t))) | "Sum" >> beam.CombinePerKey(sum)
    total = lengths | "Values" >> beam.Values() | "Total" >> beam.CombineGlobally(sum)
    shares = (lengths | "Share" >> beam.Map(lambda kv, whole: (kv[0], kv[1] / whole), beam.pvalue.AsSingleton(total)))
    both = (grouped | "Sizes" >> beam.MapTuple(lambda k, vs: (k, len(vs))), shares) | "Both" >> beam.Flatten()
    for name, pcoll in (("grouped", grouped), ("both", both), ("shuffled", counted | "Reshuffle" >> beam.Reshuffle())):
        pcoll | f"Capture[{name}]" >> beam.ParDo(_Capture(os.path.join(out, name)))


def _counters(result) -> dict:
    return {c.key.metric.name: c.committed for c in result.metrics().query(MetricsFilter())["counters"]
            if c.key.metric.namespace == "local_runner_test"}


def test_two_worker_processes_with_streamed_input_match_beams_own_runner(tmp_path, monkeypatch,
                                                                       workers_import_this_module):
    runs = []
    real_cuts = local_runner.element_cuts

    def recording_cuts(data, coder_impl, limit=None):
        cuts = real_cuts(data, coder_impl, limit)
        runs.append(len(cuts) - 1)
        return cuts

    monkeypatch.setattr(local_runner, "MESSAGE_BYTES", 4096)  # the driver cuts; the workers only read messages
    monkeypatch.setattr(local_runner, "element_cuts", recording_cuts)
    ref, got = tmp_path / "ref", tmp_path / "got"
    p = beam.Pipeline(runner=FnApiRunner())
    _build(p, str(ref))
    ref_result = p.run()
    assert ref_result.wait_until_finish() == "DONE"
    p = make_pipeline("direct", workers=2)
    assert isinstance(p.runner, local_runner.LocalRunner)
    _build(p, str(got))
    result = p.run()
    assert result.wait_until_finish() == "DONE"
    assert _captured(got) == _captured(ref)
    assert _counters(result) == _counters(ref_result) == {"seen": 4000}
    assert max(runs) > 10  # the grouped stage's input really went out in many messages


@pytest.mark.parametrize("runner, workers", [("direct", 1), ("inprocess", 2)])
def test_an_in_process_worker_reads_its_input_piece_by_piece(tmp_path, monkeypatch, runner, workers):
    """One in-process worker (``direct`` with one worker, ``inprocess``): a stage's input is listed as pieces,
    each made a message only when the worker reads it, never as one concatenated copy; outputs as Beam's."""
    made: list[int] = []
    real_messages = local_runner._PiecesOfInput.messages

    def recording_messages(self):
        for message in real_messages(self):
            made.append(len(self.pieces))  # the pieces not yet made into messages when this one is read
            yield message

    monkeypatch.setattr(local_runner, "MESSAGE_BYTES", 4096)
    monkeypatch.setattr(local_runner._PiecesOfInput, "messages", recording_messages)
    ref, got = tmp_path / "ref", tmp_path / "got"
    p = beam.Pipeline(runner=FnApiRunner())
    _build(p, str(ref))
    ref_result = p.run()
    assert ref_result.wait_until_finish() == "DONE"
    p = make_pipeline(runner, workers=workers)
    _build(p, str(got))
    result = p.run()
    assert result.wait_until_finish() == "DONE"
    assert _captured(got) == _captured(ref)
    assert _counters(result) == _counters(ref_result) == {"seen": 4000}
    assert max(made) > 10  # the grouped stage's input: many pieces, still unmade while the first were read


class _FailLate(beam.DoFn):
    def process(self, element):
        if element == 3000:
            raise ValueError("element 3000 is bad")
        yield element


def test_a_bundle_that_fails_while_its_input_streams_fails_the_run(monkeypatch, workers_import_this_module):
    monkeypatch.setattr(local_runner, "MESSAGE_BYTES", 1024)
    p = make_pipeline("direct", workers=2)
    (p | beam.Create(range(8000)) | beam.Reshuffle() | beam.ParDo(_FailLate()))
    with pytest.raises(Exception, match="element 3000 is bad"):
        p.run().wait_until_finish()


def test_worker_processes_take_numpy_temporaries_from_the_heap(tmp_path, workers_import_this_module):
    """The local runner's workers sketch (near-dedup) and clean: each sets glibc's mmap threshold in its own
    process (runio.heap), so a 4 MB array comes from the heap (a fresh process maps it: 4 MB and more)."""
    from test_dask_runner import _mapped_bytes_of_a_4mb_array

    p = make_pipeline("direct", workers=2)
    (p | beam.Create([0, 1]) | beam.Reshuffle() | beam.Map(_mapped_bytes_of_a_4mb_array)
     | beam.ParDo(_Capture(str(tmp_path / "mapped"))))
    p.run().wait_until_finish()
    assert _captured(tmp_path)["mapped"] == Counter({"0": 2})
