"""The local runner: Beam's FnApiRunner, with each stage's input streamed to its worker processes in bounded messages.

Why: the FnApiRunner sends a worker its whole share of a stage's input as one data-plane message, written before
the bundle starts (``BundleManager._send_input_to_worker`` buffers every byte and sends them on close). A worker's
memory then grows with the corpus: on 16x the shared sample a worker's RSS rose by ~800 MB within two seconds at
the start of a shuffle stage (that one message in gRPC's receive buffer, parsed, and its payload), and a
protobuf message cannot exceed 2 GB at all. Here the same input goes out in messages of about ``MESSAGE_BYTES``
(whole elements each), from a thread that runs while the bundle runs, so a worker holds at most its receive
queue's five messages of input at a time.

In-process workers (one worker, or the ``inprocess`` runner) run a bundle inside the request itself, so its input
must be listed beforehand. Beam lists it as one message: it copies the stage's whole input into one stream, then
that stream's bytes, then those into the message, and the worker takes one more copy to decode it: at a grouping
of 100 MB of documents that was +440 MiB within seconds, on top of the runner's own buffer (issue 44). Here the
input is listed as *pieces* (views of the runner's buffer, cut as above) that become messages one at a time as the
worker reads them (``_PiecesOfInput``): the worker holds one piece beside the runner's buffer.

Nothing else changes: the same bundles with the same elements in the same order reach the same workers, so
outputs are byte-identical to Beam's own runner (tests compare them).
"""
from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor

from apache_beam.coders.coder_impl import create_InputStream
from apache_beam.metrics import monitoring_infos
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.worker import data_plane

# Beam's workers send their outputs in messages of about 10 MB, which pass on as they are (not decoded); the
# runner's one message per worker for a grouped input is cut. A worker's receive queue holds five messages.
MESSAGE_BYTES = 16 << 20


def element_cuts(data: bytes, coder_impl, limit: int | None = None) -> list[int]:
    """Offsets that cut ``data`` (nested-encoded elements back to back, as on Beam's data plane) into runs of whole
    elements, each ending at the first element boundary at or past ``limit`` bytes from its start. Data no
    larger than ``limit`` (default ``MESSAGE_BYTES``) is one run, without decoding anything."""
    limit = MESSAGE_BYTES if limit is None else limit
    total = len(data)
    if total <= limit:
        return [0, total]
    cuts = [0]
    stream = create_InputStream(data)
    while stream.size() > 0:
        coder_impl.decode_from_stream(stream, True)
        end = total - stream.size()
        if end - cuts[-1] >= limit:
            cuts.append(end)
    if cuts[-1] != total:
        cuts.append(total)
    return cuts


class StreamingBundleManager(fn_runner.BundleManager):
    """A bundle whose inputs are sent while it runs, in messages of about ``MESSAGE_BYTES``."""

    def process_bundle(self, *args, **kwargs):
        self._senders: list[threading.Thread] = []
        self._send_errors: list[BaseException] = []
        result = super().process_bundle(*args, **kwargs)
        # The worker finishes a bundle only after the end of every input, so the senders are done or closing.
        for sender in self._senders:
            sender.join()
        if self._send_errors:
            err = self._send_errors[0]
            raise RuntimeError(f"sending a stage's input to its worker failed: {type(err).__name__}: {err}") from err
        return result

    def _send_input_to_worker(self, process_bundle_id, read_transform_id, byte_streams) -> None:
        data_conn = self._worker_handler.data_conn
        coder_impl = self.bundle_context_manager.get_input_coder_impl(read_transform_id)
        # The cuts are found here, so that a failure raises in the runner's own thread; the sender only copies.
        pieces = []
        for data in byte_streams or []:
            cuts = element_cuts(data, coder_impl)
            if len(cuts) == 2:  # one piece: the data itself (a view would be copied whole into a message)
                pieces.append(data)
                continue
            view = memoryview(data)
            pieces.extend(view[start:end] for start, end in zip(cuts, cuts[1:]))
        if isinstance(data_conn, data_plane.InMemoryDataChannel):  # an in-process worker: listed, read lazily
            with _LISTING:  # bundles of one stage are listed from several threads (``inprocess`` with workers)
                worker_side = data_conn.inverse()
                if not isinstance(worker_side._inputs, _InputsWithPieces):
                    worker_side._inputs = _InputsWithPieces(worker_side._inputs)
                worker_side._inputs.append(_PiecesOfInput(process_bundle_id, read_transform_id, pieces))
            return
        if not isinstance(data_conn, data_plane._GrpcDataChannel):  # a channel of another kind: Beam's way
            super()._send_input_to_worker(process_bundle_id, read_transform_id, byte_streams)
            return
        stream = data_conn.output_stream(process_bundle_id, read_transform_id)

        def send() -> None:
            try:
                for piece in pieces:
                    stream.write(bytes(piece))
                    stream.flush()  # one data-plane message; blocks while the runner's send queue is full
            except BaseException as err:  # reported by process_bundle; the input is closed so the bundle ends
                self._send_errors.append(err)
            finally:
                stream.close()

        sender = threading.Thread(target=send, name=f"corpusmill-input-{process_bundle_id}", daemon=True)
        sender.start()
        self._senders.append(sender)


_LISTING = threading.Lock()


class _PiecesOfInput:
    """A stage's input for an in-process worker: pieces of whole elements, each made a data-plane message only
    when the worker reads it (``_InputsWithPieces``)."""

    def __init__(self, instruction_id: str, transform_id: str, pieces: list):
        self.instruction_id, self.transform_id, self.pieces = instruction_id, transform_id, pieces

    def messages(self):
        while self.pieces:
            piece = self.pieces.pop(0)
            yield beam_fn_api_pb2.Elements.Data(instruction_id=self.instruction_id, transform_id=self.transform_id,
                                                data=piece if isinstance(piece, bytes) else bytes(piece))


class _InputsWithPieces(list):
    """The in-process data channel's list of inputs (``InMemoryDataChannel._inputs``, which its worker iterates
    once per bundle, keeping the other bundles' entries), where a ``_PiecesOfInput`` stands for its messages."""

    def __iter__(self):
        for element in list.__iter__(self):
            if isinstance(element, _PiecesOfInput):
                yield from element.messages()
            else:
                yield element


class StreamingParallelBundleManager(fn_runner.ParallelBundleManager):
    """Beam's split of a stage's input into one part per worker, each part run by a ``StreamingBundleManager``."""

    def process_bundle(self, inputs, expected_outputs, fired_timers, expected_output_timers, dry_run=False):
        parts: list[dict] = [{} for _ in range(self._num_workers)]
        for name, buffer in inputs.items():
            for part, elements in zip(parts, buffer.partition(self._num_workers)):
                part[name] = elements
        timers = [fired_timers] + [{}] * (self._num_workers - 1)  # as Beam: fired timers go to the first part only

        def run(part_and_timers):
            part, part_timers = part_and_timers
            manager = StreamingBundleManager(self.bundle_context_manager, self._progress_frequency,
                                             cache_token_generator=self._cache_token_generator)
            return manager.process_bundle(part, expected_outputs, part_timers, expected_output_timers, dry_run)

        with ThreadPoolExecutor(self._num_workers, thread_name_prefix="corpusmill-bundle") as pool:
            results = list(pool.map(run, zip(parts, timers)))
        splits = [split for _, part_splits in results for split in part_splits]
        if len(results) == 1:
            return results[0][0], splits
        responses = [response for response, _ in results]
        merged = beam_fn_api_pb2.InstructionResponse(
            process_bundle=beam_fn_api_pb2.ProcessBundleResponse(monitoring_infos=monitoring_infos.consolidate(
                itertools.chain.from_iterable(r.process_bundle.monitoring_infos for r in responses))),
            error=next((r.error for r in responses if r.error), ""))
        return merged, splits


class LocalRunner(fn_runner.FnApiRunner):
    """The FnApiRunner with ``StreamingBundleManager``s: same stages, same bundles, bounded input messages."""

    def _get_bundle_manager(self, bundle_context_manager):
        beams = super()._get_bundle_manager(bundle_context_manager)
        kind = (StreamingParallelBundleManager if isinstance(beams, fn_runner.ParallelBundleManager)
                else StreamingBundleManager)
        return kind(bundle_context_manager, self._progress_frequency,
                    cache_token_generator=beams._cache_token_generator)
