"""Combiner lifting: ``CombinePerKey(fn)`` as partial combine → shuffle of accumulators → merge and extract.

Beam expands ``CombinePerKey`` (and so ``CombineGlobally``, ``Count``, ``Mean``, ``Top``, ...) into a
GroupByKey of every value followed by ``CombineValues``: one reducer then holds every value of a key (all of
them, for ``CombineGlobally``). Lifted, each input partition sends one accumulator per key instead, as the
FnApiRunner and Dataflow do. The two halves are ordinary DoFns, so they run (and fuse) like any ParDo.
"""
from __future__ import annotations

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue


class PartialCombineFn(beam.DoFn):
    """Per bundle: one accumulator per key (grouped by the encoded key, as a GroupByKey would); emitted,
    compacted, when the bundle finishes."""

    def __init__(self, combine_fn, args, kwargs, key_coder):
        self.combine_fn, self.args, self.kwargs, self.key_coder = combine_fn, tuple(args), dict(kwargs), key_coder

    def setup(self):
        self.combine_fn.setup()

    def start_bundle(self):
        self._accumulators = {}

    def process(self, element):
        key, value = element
        kb = self.key_coder.encode(key)
        entry = self._accumulators.get(kb)
        if entry is None:
            entry = self._accumulators[kb] = [key, self.combine_fn.create_accumulator(*self.args, **self.kwargs)]
        entry[1] = self.combine_fn.add_input(entry[1], value, *self.args, **self.kwargs)

    def finish_bundle(self):
        window = GlobalWindow()
        for key, accumulator in self._accumulators.values():
            yield WindowedValue((key, self.combine_fn.compact(accumulator, *self.args, **self.kwargs)),
                                window.max_timestamp(), (window,))
        self._accumulators = {}

    def teardown(self):
        self.combine_fn.teardown()


class MergeAndExtractFn(beam.DoFn):
    def __init__(self, combine_fn, args, kwargs):
        self.combine_fn, self.args, self.kwargs = combine_fn, tuple(args), dict(kwargs)

    def setup(self):
        self.combine_fn.setup()

    def process(self, element):
        key, accumulators = element
        merged = self.combine_fn.merge_accumulators(accumulators, *self.args, **self.kwargs)
        yield key, self.combine_fn.extract_output(merged, *self.args, **self.kwargs)

    def teardown(self):
        self.combine_fn.teardown()
