"""Near-dedup's shuffles through files (issue 44): the phased clean's decisions from stored sketches are the same
whether the shuffles carry blocks or paths to spilled blocks, on every path, and spilled blocks do go to files."""
from __future__ import annotations

import pickle

import apache_beam as beam
import numpy as np
import pytest

from beamio.beam_options import make_pipeline
from test_near_dedup import _beam_corpus
from transforms.near_dedup.beam import DecisionsFromSketches
from transforms.near_dedup.blocks import SketchRows
from transforms.near_dedup.core import NearDedupConfig, SketchBuilder, dedup_in_memory


@pytest.fixture(scope="module")
def sketch_files(tmp_path_factory):
    """The corpus's sketches in two files, as phase A of the clean in units stores them; the core's decisions."""
    docs = _beam_corpus()
    folder = tmp_path_factory.mktemp("sketches")
    cfg = NearDedupConfig()
    sketches = [s for s in SketchBuilder(cfg).sketch_batch(docs) if s is not None]
    paths = []
    for i, half in enumerate((sketches[::2], sketches[1::2])):
        path = folder / f"unit-{i}.pkl"
        path.write_bytes(pickle.dumps(SketchRows.of(half)))
        paths.append(str(path))
    core = {d.id: d for d in dedup_in_memory(sketches, cfg)}
    return paths, core


def decisions_of(paths, tmp_path, mode: str, spill_dir):
    out = tmp_path / f"decisions-{mode}-{spill_dir is not None}.pkl"
    pipeline = make_pipeline("inprocess", 1)
    pipeline | DecisionsFromSketches(NearDedupConfig(mode=mode), paths, np.zeros(0, dtype=np.int64), str(out),
                                     path=mode, parts=4, spill_dir=spill_dir)
    assert pipeline.run().wait_until_finish() == "DONE"
    rows = pickle.loads(out.read_bytes())
    return {d.id: d for d in rows.decisions()}


@pytest.mark.parametrize("mode", ["memory", "beam", "auto"])
def test_spilled_shuffles_give_the_same_decisions_on_every_path(sketch_files, tmp_path, mode):
    paths, core = sketch_files
    spill = tmp_path / f"spill-{mode}"
    spilled = decisions_of(paths, tmp_path, mode, str(spill))
    assert spilled == decisions_of(paths, tmp_path, mode, None) == core
    assert sum(d.removed for d in spilled.values()) >= 12
    # the blocks went through files (the caller removes the folder): the sketches with their shingles among them
    blocks = [pickle.loads(p.read_bytes()) for p in spill.iterdir()]
    assert any(isinstance(b, SketchRows) and len(b.shingles) for b in blocks)
