"""The documentation a newcomer reads stays short, complete and current.

- docs/config.md is generated from the config models (pipelines/config_reference.py): a field whose description,
  type or default changed without `make docs` fails here;
- README.md stays a ten-minute read (at most 300 lines), names every package directory, and every docs/*.md
  page it links exists (and every page under docs/ is linked from it).
"""
from __future__ import annotations

import re
from pathlib import Path

from pipelines.config_reference import REFERENCE_PATH, render

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"

# Every top-level directory of the repository that a newcomer must be able to place.
PACKAGE_DIRS = ("runio", "beamio", "transforms", "tokenizer", "beam_dask", "trainer_bridge", "pipelines",
                "lineage", "experiments", "report", "cli", "configs", "tests", "benchmarks", "docs", "data")


def test_config_reference_is_current():
    assert REFERENCE_PATH == REPO / "docs" / "config.md"
    on_disk = REFERENCE_PATH.read_text(encoding="utf-8") if REFERENCE_PATH.is_file() else ""
    assert on_disk == render(), "docs/config.md is stale: run `make docs` (python -m pipelines.config_reference)"


def test_config_reference_describes_every_field():
    text = render()
    assert "| `steps` | int | `1000` |" in text  # train.steps, with its type and default
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| key ")]
    undescribed = [row for row in rows if row.rstrip().endswith("|  |")]
    assert not undescribed, f"fields without a description= text: {undescribed}"


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move detail to a page under docs/"


def test_readme_names_every_package_directory():
    readme = README.read_text(encoding="utf-8")
    on_disk = {p.name for p in REPO.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    missing = [name for name in sorted(set(PACKAGE_DIRS) | on_disk) if f"`{name}/`" not in readme]
    assert not missing, f"README.md does not name these directories (as `name/`): {missing}"


def test_readme_links_resolve_and_cover_docs():
    readme = README.read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\((docs/[^)#\s]+\.md)(?:#[^)]*)?\)", readme))
    assert linked, "README.md links no page under docs/"
    broken = sorted(path for path in linked if not (REPO / path).is_file())
    assert not broken, f"README.md links pages that do not exist: {broken}"
    pages = {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")}
    unlinked = sorted(pages - linked)
    assert not unlinked, f"pages under docs/ that README.md does not link: {unlinked}"


def test_docs_pages_link_only_existing_pages():
    broken = []
    for page in (REPO / "docs").glob("*.md"):
        for target in re.findall(r"\]\(([^)#\s:]+\.md)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if not (page.parent / target).resolve().is_file():
                broken.append(f"{page.name} -> {target}")
    assert not broken, f"links to pages that do not exist: {broken}"


def test_results_show_the_present_one_table_per_measurement_with_its_command_and_date():
    """benchmarks/RESULTS.md: at most 500 lines, and every table's section says the command that produced it and
    the date it ran (the dated lab log lives in benchmarks/history/, never as current figures)."""
    text = (REPO / "benchmarks" / "RESULTS.md").read_text()
    assert len(text.splitlines()) <= 500, f"RESULTS.md has {len(text.splitlines())} lines (at most 500)"
    sections = re.split(r"\n(?=## )", text)
    missing = []
    for section in sections:
        if not re.search(r"^\|.*\|$", section, flags=re.M) or section.startswith("## The benchmark scripts"):
            continue
        title = section.splitlines()[0]
        if "Command" not in section or not re.search(r"Date[^\n]*20\d\d-\d\d-\d\d", section):
            missing.append(title)
    assert not missing, f"sections with a table but no Command or no dated Date line: {missing}"
