"""Contract 4's sample order, without torch: the trainer's loader and the readers of a run directory
(``lineage``) use this one definition."""
from __future__ import annotations

import numpy as np

# Names the sample order below in train/data_order.jsonl: a reader that knows this name can replay which rows
# every step used (``lineage``); a changed order must get a new name, so that old runs are never misread.
SAMPLE_ORDER = "pcg64-permutation-per-epoch/1"


class SampleOrder:
    """Global sample index -> row index: epoch e is a permutation of all rows seeded by (seed, e)
    (``numpy.random.Generator(PCG64([seed, e])).permutation(rows)``; ``SAMPLE_ORDER`` names it)."""

    def __init__(self, num_rows: int, seed: int):
        if num_rows <= 0:
            raise ValueError("the training split has no rows: nothing to train on")
        self.num_rows = num_rows
        self.seed = seed
        self._epoch = -1
        self._permutation = np.empty(0, dtype=np.int64)

    def permutation(self, epoch: int) -> np.ndarray:
        """Row of each position of ``epoch``: sample ``epoch * num_rows + p`` is row ``permutation(epoch)[p]``."""
        return np.random.Generator(np.random.PCG64([self.seed, epoch])).permutation(self.num_rows)

    def row_index(self, sample_index: int) -> int:
        epoch, position = divmod(sample_index, self.num_rows)
        if epoch != self._epoch:
            self._permutation = self.permutation(epoch)
            self._epoch = epoch
        return int(self._permutation[position])
