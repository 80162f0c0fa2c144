"""``ReadCorpus``: ``beamio.read``'s parsing run in Beam (one file per worker, documents spread after)."""
from __future__ import annotations

from typing import Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from beamio.config_base import InputConfig
from beamio.read import (InputFile, Quarantined, Skipped, _as_input_files, detect_format, read_file_indexed,
                         records_in, resolve_inputs)
from runio.progress import ProgressFile


class _ReadFileFn(beam.DoFn):
    def __init__(self, cfg: InputConfig, progress_dir: str | None = None):
        self.cfg = cfg
        self.progress_dir = progress_dir
        self._progress = None
        self._docs = Metrics.counter("read", "documents")
        self._quarantined = Metrics.counter("read", "quarantined")
        self._bytes = Metrics.counter("read", "text_bytes")
        self._records = Metrics.counter("read", "records")
        self._skipped = Metrics.counter("read", "skipped")
        self._skipped_by: dict = {}

    def setup(self):
        self._progress = ProgressFile(self.progress_dir, "read")

    def finish_bundle(self):
        self._progress.flush()

    def process(self, source: InputFile):
        items, last = 0, -1
        for index, item in read_file_indexed(source.path, self.cfg, source):
            items, last = items + 1, max(last, index)
            self._progress.add(1)
            if isinstance(item, Skipped):  # no document by design: counted per reason, not quarantined
                self._skipped.inc()
                if item.kind not in self._skipped_by:
                    self._skipped_by[item.kind] = Metrics.counter("read", f"skipped/{item.kind}")
                self._skipped_by[item.kind].inc()
            elif isinstance(item, Quarantined):
                self._quarantined.inc()
                yield beam.pvalue.TaggedOutput("quarantined", item.as_record())
            else:
                self._docs.inc()
                self._bytes.inc(len(item["text"].encode("utf-8")))
                yield item
        # records the file held, counted from the parser's record numbering (beamio.read.records_in)
        self._records.inc(records_in(detect_format(source.path, self.cfg.format), items, last))


class ReadCorpus(beam.PTransform):
    """Resolve the configured paths, then read each file into documents; unreadable input is quarantined.

    ``files``: the inputs to read (``InputFile`` from ``resolve_inputs``, or plain paths, each named by its base
    name); default: every file of ``cfg.paths``. ``spread_documents``: deal the documents out again after
    reading (one file is read by one worker, so with fewer files than workers that is what lets every worker
    take a share of the work that follows); a caller with many files per worker turns it off and spares every
    document a round trip through the shuffle. Returns ``{"docs": PCollection[Doc], "quarantined":
    PCollection[dict]}``.
    """

    def __init__(self, cfg: InputConfig, files: Sequence[InputFile | str] | None = None,
                 progress_dir: str | None = None, spread_documents: bool = True):
        super().__init__()
        self.cfg = cfg
        self.files = resolve_inputs(cfg.paths) if files is None else _as_input_files(files)
        self.progress_dir = progress_dir
        self.spread_documents = spread_documents

    def expand(self, pbegin):
        outputs = (
            pbegin
            | "ListFiles" >> beam.Create(self.files)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFiles" >> beam.ParDo(_ReadFileFn(self.cfg, self.progress_dir)).with_outputs("quarantined", main="docs")
        )
        # One file is read by one worker; spreading its documents lets every worker clean a share of them.
        docs = outputs.docs | "SpreadDocuments" >> beam.Reshuffle() if self.spread_documents else outputs.docs
        return {"docs": docs, "quarantined": outputs.quarantined}
