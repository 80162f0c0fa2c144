"""The `corpusmill` command line: `cli.main` is the entry point, one module per command area.

Every command takes its settings through `pipelines.config` (`load_config` for a whole run, `load_section` for
one section with `--set` overrides) and reads its input through `pipelines.read`, so a command sees the same
configuration errors, inputs and quarantine reasons as a run.
"""
