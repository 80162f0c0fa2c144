"""Annotations a pipeline's transforms give the runner, named here, below both the step that makes the promise and
the runner that keeps it, so that neither imports the other. No Beam is imported here: a step's module is
imported again in every worker that runs it.
"""

# A GroupByKey applied under ``transform_annotations(shuffle_partitions="N")`` promises that its keys are the ints
# 0..N-1, each naming a partition already (near-dedup's blocks). The Dask runner then groups it into exactly N
# partitions, key k into partition k (beam_dask/translate.py); other runners hash the keys as usual.
SHUFFLE_PARTITIONS = "shuffle_partitions"
