"""Pipeline options whose views are built once: ``ViewOnceOptions``.

Beam's ``PipelineOptions.view_as(cls)`` builds an argparse parser of ``cls``'s options and parses the flags again on
every call, and ``Pipeline.apply`` asks for several views per transform (type checks, resource hints, the runner's
own options). Building near-dedup's distributed graph for the demo corpus made ~320 such views: 40 % of the
graph's building time (``benchmarks/bench_dedup_fixed_cost.py``). A view holds no value of its own: it reads and
writes the ``_all_options`` dict it shares with the object it was made from, so one view per class sees every
later change exactly as a fresh one would.
"""
from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions


class ViewOnceOptions(PipelineOptions):
    """``PipelineOptions`` that keep one view per options class (see the module docstring)."""

    def view_as(self, cls):
        views = self.__dict__.get("_views")
        if views is None:
            views = {}
            object.__setattr__(self, "_views", views)  # PipelineOptions' __setattr__ takes option names only
        view = views.get(cls)
        if view is None:
            view = views[cls] = super().view_as(cls)
        return view

    def __getstate__(self):
        # A copy (Pipeline deep-copies its options) or a pickle makes its own views, over its own values.
        state = dict(super().__getstate__())
        state.pop("_views", None)
        return state
