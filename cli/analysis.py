"""What the analysis commands (`corpusmill dedup`, `pii`, `quality score`) share, so that they check their
settings, their --out and their inputs alike and report what they set aside the same way: ``run_config_for``,
``check_out_path``, ``check_new_folder``, ``no_document_exit_code`` and ``quarantine_summary`` (and
``pipelines.twins.TextTwins`` for the copies of a text file)."""
from __future__ import annotations

import os
import sys
from runio.errors import ExitCode
from typing import Sequence

from beamio.config_base import ConfigError, read_config_file
from beamio.read import is_text_file


def run_config_for(command: str, config_path: str | None, input_cfg, **own_sections):
    """The run config of ``config_path`` validated as a whole, as ``prepare`` validates it: every section and key
    is checked, so a misspelt section (``pii_:``) is an error naming it (exit 2), not a section silently left at
    its defaults. ``own_sections`` (e.g. ``pii=cfg``) are the command's sections, already loaded by
    ``load_section`` with its --set/--param/flags applied: they replace the file's (which ``load_section``
    validated). The file may leave out ``name`` and ``input``: the command reads what its arguments name
    (``input_cfg``); when the file has them they are checked as ``prepare`` checks them. Imports every step's
    config, Beam with them: the Beam-free path of ``dedup`` calls this only when a config file is given."""
    # deferred: the run config imports Beam, which `corpusmill dedup` (it imports this module) runs without
    from pipelines.config import read_config_file, validate_config

    data = read_config_file(config_path) if config_path is not None else {}
    for name in own_sections:
        data.pop(name, None)
    data.setdefault("name", command)
    data.setdefault("input", input_cfg.model_dump())
    return validate_config(data).model_copy(update={"input": input_cfg, **own_sections})


def resolve_input_fields(args, id_default: str = "id") -> None:
    """``args.text_field`` / ``args.id_field`` as the flags give them, else as the ``--config`` file's ``input``
    section names them, else ``text`` / ``id_default``: a config whose documents keep their text under another
    name is not read with the default one."""
    section = {}
    if getattr(args, "config", None):
        raw = read_config_file(args.config).get("input")
        section = raw if isinstance(raw, dict) else {}
    if args.text_field is None:
        args.text_field = section.get("text_field") or "text"
    if args.id_field is None:
        args.id_field = section.get("id_field") or id_default


def check_out_path(path: str, option: str = "--out") -> None:
    """Refuse, before any work, an output file that cannot be written (exit 2, one line naming it): an existing
    directory, or a parent that is not a directory or cannot be written. Creates nothing: the command makes the
    missing folders when it writes."""
    target = os.path.abspath(path)
    if os.path.isdir(target):
        raise ConfigError(f"{option} {path}: is a directory; give the path of a file (e.g. "
                          f"{os.path.join(path, 'out.jsonl')})")
    _check_can_create(path, os.path.dirname(target), option)


def _check_can_create(path: str, parent: str, option: str) -> None:
    """``path`` can be made in ``parent``: the nearest folder that exists (it holds the ones the command will
    make) is a directory the command may write."""
    nearest = parent
    while not os.path.lexists(nearest):
        nearest = os.path.dirname(nearest)
    if not os.path.isdir(nearest):
        raise ConfigError(f"{option} {path}: {nearest} is not a directory, so {path} cannot be created in it")
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {path}: the directory {nearest} is not writable")


def check_new_folder(path: str, option: str, read_from: Sequence[str] = ()) -> None:
    """Refuse, before any work, a local output folder that cannot be a new one (exit 2, one line): a file, a
    folder that already holds files (what is written there is whole, never merged with what was there: an
    index with fewer parts than the one before it would be read back mixed with that one's left-over parts),
    one of the inputs ``read_from``, or one whose nearest existing parent cannot be written. URIs
    (``gs://...``) are left to their file system."""
    if "://" in path:
        return
    target = os.path.abspath(path)
    if any(os.path.abspath(other) == target for other in read_from if "://" not in other):
        raise ConfigError(f"{option} {path}: is also an input of this run; write into a new folder")
    if os.path.lexists(target) and not os.path.isdir(target):
        raise ConfigError(f"{option} {path}: is a file; give a folder")
    if os.path.isdir(target) and any(os.scandir(target)):
        raise ConfigError(f"{option} {path}: the folder already holds files; give a new or empty folder")
    _check_can_create(path, target if os.path.isdir(target) else os.path.dirname(target), option)


MISSING_ID = "missing_id"  # the kind of a record set aside for want of its id (a command that needs one: pii)


def no_document_exit_code(command: str, task: str, n_docs: int, set_aside: list[dict], text_field: str,
                          id_field: str | None = None, set_aside_as: str = "quarantined") -> int:
    """``NOT_USABLE`` (1) when records were read but none of them is a document (every one quarantined, most often a text field
    under another name: the hint names the option), 0 otherwise (an empty input is not an error). ``set_aside``:
    the records' quarantine records (``kind``, ...), with ``MISSING_ID`` ones for a command that needs an id."""
    if n_docs or not set_aside:
        return ExitCode.OK
    kinds = {record["kind"] for record in set_aside}
    hints = [f"; is the text in another field than {text_field!r}? (--text-field)"] * ("missing_text" in kinds)
    hints += [f"; is the id in another field than {id_field!r}? (--id-field)"] * (MISSING_ID in kinds)
    print(f"corpusmill {command}: no document {task}: all {len(set_aside)} records were {set_aside_as}"
          f"{''.join(hints)}", file=sys.stderr)
    return ExitCode.NOT_USABLE


def quarantine_summary(records: list[dict]) -> str:
    """``N quarantined`` with the count per kind and the first record's place and reason, e.g. ``1 quarantined
    (empty_text: 1; first: part-001.jsonl.gz record 4250: 'text' is empty)``."""
    if not records:
        return "0 quarantined"
    kinds: dict[str, int] = {}
    for record in records:
        kinds[record["kind"]] = kinds.get(record["kind"], 0) + 1
    first = min(records, key=lambda r: (r["source"], r["position"]))
    per_kind = ", ".join(f"{kind}: {n}" for kind, n in sorted(kinds.items()))
    return (f"{len(records)} quarantined ({per_kind}; first: {first['source']} record {first['position']}: "
            f"{first['reason']})")
