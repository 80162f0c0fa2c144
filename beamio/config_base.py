"""The light part of the run config: errors, the ``input`` section, ``--set`` overrides and ``load_section`` (one
section of a config for a command that needs only that section). No Beam and no step modules are imported here,
so a command such as ``corpusmill dedup`` on its in-memory path can start without them; ``pipelines.config``
re-exports every name.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration problem, phrased for the person who wrote the file."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputConfig(Strict):
    paths: list[str] = Field(min_length=1, description="files, folders or globs; local paths or any Beam FileSystems URI")
    format: Literal["auto", "jsonl", "parquet", "text", "warc", "arc", "html", "pdf", "docx", "markdown"] = Field(
        "auto", description="auto (by file extension), jsonl, parquet, text (one document per file), warc (WARC and "
                            "WET), arc, html, pdf, docx or markdown (see docs/inputs.md)")
    text_field: str = Field("text", description="record field holding the document text; the other fields go to meta")
    id_field: str | None = Field(None, description="input field reported as the document's id by analysis commands")
    max_doc_bytes: int = Field(8_000_000, gt=0, description="larger documents are quarantined, never loaded whole")
    max_record_bytes: int = Field(50_000_000, gt=0,
                                  description="raw sources (WARC/ARC/WET records, HTML, PDF, DOCX and Markdown files): "
                                              "a record or file with more bytes is skipped as too_large, without "
                                              "being held in memory whole")


def _parse_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects section.key=value, got {item!r}")
        dotted, raw = item.split("=", 1)
        keys = [k for k in dotted.strip().split(".") if k]
        if not keys:
            raise ConfigError(f"--set expects section.key=value, got {item!r}")
        node = data
        for key in keys[:-1]:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {dotted}: {key!r} is not a section")
            node = child
        node[keys[-1]] = _parse_value(raw)
    return data


def _format_error(err: ValidationError, prefix: str = "") -> str:
    lines = []
    for e in err.errors():
        field = ".".join([*([prefix] if prefix else []), *(str(p) for p in e["loc"])]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling against the config reference in docs/config.md)"
        elif e["type"] == "literal_error":
            msg = f"must be one of {e.get('ctx', {}).get('expected', '')}, got {e.get('input')!r}"
        elif e["type"] == "value_error":  # a validator's own message: without pydantic's "Value error, " before it
            msg = str(e.get("ctx", {}).get("error", msg))
        lines.append(f"  {field}: {msg}")
    return "invalid configuration:\n" + "\n".join(lines)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error: PyYAML keeps the last one without a
    word, so `name: a` ... `name: b` in a long config would silently run as b."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` merges (its keys may be overridden) and complex keys: not checked
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice in one mapping",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong and where (PyYAML's own message spans several lines, with the
    offending text quoted under a caret)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else problem


def read_config_file(path: str | Path) -> dict:
    """The sections of a run config YAML file, not yet validated."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder, not a config file")
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}  # noqa: S506 - safe
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {_yaml_problem(err)}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start}): "
                          f"save it as UTF-8") from None
    except OSError as err:
        raise ConfigError(f"config file {path} cannot be read ({type(err).__name__}: {err.strerror or err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return data


def param_overrides(section: str, pairs: list[str], option: str = "--param") -> list[str]:
    """A command's ``--param KEY=VALUE`` pairs (keys relative to ``section``) as ``section.KEY=VALUE``."""
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"{option} {pair!r}: expected KEY=VALUE")
    return [f"{section}.{pair.strip()}" for pair in pairs]


def load_section(config_path: str | Path | None, section: str, model_cls: type[M], overrides: list[str] = (),
                 *, values: dict[str, Any] | None = None, aliases: tuple[str, ...] = ()) -> M:
    """One section of a run config, validated, for a command that needs only that section.

    ``config_path`` is a run config YAML whose ``section`` is read, or ``None`` for the section's defaults;
    ``section`` may be dotted (``quality.train``). ``overrides`` are ``--set`` items ``section.key=value``
    (``alias.key=value`` too, for each of ``aliases``); an item for another section is an error. ``values``
    are settings already typed (a choice flag, a secret from the environment), applied last. Every problem is
    a ConfigError in ``load_config``'s format, naming the field: ``invalid configuration:\n  section.key: …``.
    """
    node: Any = read_config_file(config_path) if config_path is not None else {}
    for key in section.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    if node is not None and not isinstance(node, dict):
        raise ConfigError(f"invalid configuration:\n  {section}: must be a mapping of settings, got {node!r}")
    data = dict(node or {})
    relative = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects section.key=value, got {item!r}")
        item = item.strip()
        prefix = next((p for p in (section, *aliases) if item.startswith(p + ".")), None)
        if prefix is None:
            also = f" (or {' or '.join(a + '.KEY=VALUE' for a in aliases)})" if aliases else ""
            raise ConfigError(f"--set {item!r}: only {section}.KEY=VALUE{also} applies here")
        relative.append(item[len(prefix) + 1:])
    data = apply_overrides(data, relative)
    data.update(values or {})
    try:
        return model_cls.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_error(err, prefix=section)) from None
