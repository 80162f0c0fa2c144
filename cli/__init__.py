"""The `corpusmill` command line: `cli.main` is the entry point, one module per command area.

Every command takes its settings through `pipelines.config` (`load_config` for a whole run, `load_section` for
one section with `--set` overrides) and reads its input through `beamio.read`, so a command sees the same
configuration errors, inputs and quarantine reasons as a run.
"""


def positive_int(text: str) -> int:
    """argparse type of a count such as ``--workers``: a whole number ≥ 1 (0 is an error, not the default)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1, got {value}")
    return value
