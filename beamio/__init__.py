"""The Beam I/O floor: reading the inputs (``read``: no Beam; ``read_beam``: ``ReadCorpus``), building a pipeline
for the configured runner (``beam_options``: ``make_pipeline``; ``local_runner`` and its ``worker``;
``option_views``), what is logged (``logs``: ``quiet_logging``), the input config section (``config_base``) and
the sorted, deterministic output files (``write``: ``WriteSorted``). It sits above ``runio`` and below
``transforms``, ``tokenizer``, ``beam_dask`` and ``trainer_bridge``, and imports none of them: the Dask runner,
a floor above, is named to Beam by its class path (``beam_options.DASK_RUNNER``).
"""
