"""`corpusmill`: one entry point; each area registers its subcommands from its own module."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
import warnings

COMMAND_MODULES = (
    "cli.tokenizer",
    "cli.prepare",
    "cli.train",
    "cli.pii",
    "cli.dedup",
    "cli.report",
    "cli.quality",
    "cli.hf",
)


def quiet_libraries() -> None:
    """Keep the terminal for our own progress and summary: libraries speak only when something is wrong."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        # Beam warns at import that optional GCP clients are missing; irrelevant unless gs:// is used.
        handler.addFilter(lambda record: not str(record.msg).startswith("apitools not found"))
    for name in ("apache_beam", "presidio-analyzer", "presidio-anonymizer", "tldextract", "urllib3"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="corpusmill", description="Raw text corpora to a trained language "
                                     "model: Beam cleaning, Arrow shards, a PyTorch trainer.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    quiet_libraries()
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "accepts_beam_args", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.beam_args = unknown
    from pipelines.config import ConfigError
    from transforms.base import StepConfigError

    try:
        return int(args.handler(args) or 0)
    except (ConfigError, StepConfigError) as err:  # a setting that cannot work, named: exit 2, one message
        print(f"corpusmill {args.command}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"corpusmill {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
