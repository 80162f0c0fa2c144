"""beamio/option_views.py: one view per options class, reading and writing the values every view shares, as
Beam's fresh views do."""
from __future__ import annotations

import copy
import pickle

import apache_beam as beam
from apache_beam.options.pipeline_options import DebugOptions, PipelineOptions, StandardOptions, TypeOptions

from beamio.beam_options import make_pipeline
from beamio.option_views import ViewOnceOptions


def test_a_view_is_built_once_and_sees_what_any_view_or_the_flags_set():
    options = ViewOnceOptions(["--runner=DirectRunner", "--experiments=a"])
    standard = options.view_as(StandardOptions)
    assert options.view_as(StandardOptions) is standard and standard.runner == "DirectRunner"
    options.view_as(StandardOptions).runner = "Other"  # written through a view...
    assert standard.runner == "Other" and options.get_all_options()["runner"] == "Other"  # ...read by all
    options.view_as(DebugOptions).add_experiment("b")
    assert options.view_as(DebugOptions).experiments == ["a", "b"]
    assert options.view_as(TypeOptions).pipeline_type_check is True  # defaults as a fresh view has them


def test_copies_and_pickles_get_their_own_views_over_their_own_values():
    options = ViewOnceOptions(["--runner=DirectRunner"])
    options.view_as(StandardOptions)
    copied = copy.deepcopy(options)
    copied.view_as(StandardOptions).runner = "Copied"
    assert options.view_as(StandardOptions).runner == "DirectRunner"
    assert copied.view_as(StandardOptions) is copied.view_as(StandardOptions)
    restored = pickle.loads(pickle.dumps(options))
    assert "_views" not in options.__getstate__()
    assert restored.view_as(StandardOptions).runner == "DirectRunner"


def test_a_pipeline_built_on_them_matches_one_on_beams_options():
    """Pipeline deep-copies its options and asks them for views at every apply: same graph, same result."""
    def build(p):
        return (p | beam.Create(range(20)) | beam.Map(lambda x: (x % 3, x)) | beam.GroupByKey()
                | beam.MapTuple(lambda k, vs: (k, sum(vs))))

    ours = make_pipeline("inprocess", 1)
    assert isinstance(ours._options, ViewOnceOptions)
    plain = beam.Pipeline(runner=ours.runner, options=PipelineOptions(ours._options._flags))
    for p in (ours, plain):
        out = build(p)
        assert out.element_type == build(beam.Pipeline()).element_type
    assert len(ours.to_runner_api().components.transforms) == len(plain.to_runner_api().components.transforms)
