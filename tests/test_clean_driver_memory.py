"""What the clean's driver process holds (issue 44): building a graph with the PII step loads no PII engine there
(Beam's bytecode inference of the step's DoFn read ``PiiStep.engine`` and built Presidio + spaCy, ~480 MB, in the
driver for every unit of the clean in units)."""
from __future__ import annotations

import apache_beam as beam

import transforms.pii.step as pii_step
from beamio.beam_options import make_pipeline
from transforms.beam_step import ApplyStep


def test_building_the_pii_step_into_a_graph_builds_no_engine_in_the_driver(monkeypatch):
    built = []
    monkeypatch.setattr(pii_step, "PiiEngine", lambda cfg: built.append(cfg) or object())
    pipeline = make_pipeline("inprocess", 1)
    docs = pipeline | beam.Create([{"id": 1, "text": "call 030 1234567", "source": "t", "meta": {},
                                    "annotations": {}}])
    docs | ApplyStep(pii_step.PiiStep(pii_step.PiiConfig(ner="off")))
    assert built == []
