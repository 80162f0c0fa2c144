"""The layering rule (issue 43, item 2), checked on the source: the import graph of the project's own modules,
built with ``ast`` from every ``import`` statement, at the top of a module and inside functions alike.

Package floors, ground up; a module may import its own floor or a lower one, never a higher one::

    runio → beamio → transforms, tokenizer, beam_dask → trainer_bridge → pipelines, lineage → experiments, report → cli

No circle between the project's modules (an import inside a function closes a circle as surely as one at the
top: it only hides it until the function runs), and an import of the project's own modules inside a function
says why on its line or the line above (it may only defer a heavy optional dependency: torch, optuna, dask,
presidio, Beam in a command that does not need it).
"""
from __future__ import annotations

import ast
import io
import tokenize
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOORS = {"runio": 0, "beamio": 1, "transforms": 2, "tokenizer": 2, "beam_dask": 2, "trainer_bridge": 3,
          "pipelines": 4, "lineage": 4, "experiments": 5, "report": 5, "cli": 6}


@dataclass(frozen=True)
class Import:
    """One imported project module, as one statement of ``source`` names it."""

    source: str        # the importing module, dotted
    target: str        # the imported project module, dotted
    line: int          # the statement's first line in the source file
    in_function: bool  # the statement runs when a function is called, not when the module is imported
    explained: bool    # a comment on the statement's lines or a comment line right above it


def _module_files() -> dict[str, Path]:
    modules = {}
    for package in FLOORS:
        for path in sorted((ROOT / package).rglob("*.py")):
            dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[dotted.removesuffix(".__init__")] = path
    return modules


def _commented_lines(text: str) -> set[int]:
    return {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type == tokenize.COMMENT}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module that ``name`` (a dotted module path, or a module's attribute) is, or lives in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the importing module's package, one level up per extra dot
            package = module if is_package else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        # `from x import y` imports the submodule x.y when there is one, else a name defined in x
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    return {target for target in (_resolve(name, modules) for name in names) if target and target != module}


def _imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    commented = _commented_lines(text)
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                own_lines = range(child.lineno, (child.end_lineno or child.lineno) + 1)
                above = child.lineno - 1
                explained = (any(n in commented for n in own_lines)
                             or (above >= 1 and lines[above - 1].lstrip().startswith("#")))
                for target in sorted(_targets(child, module, path.name == "__init__.py", modules)):
                    found.append(Import(module, target, child.lineno, in_function, explained))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(text, filename=str(path)), False)
    return found


@lru_cache(maxsize=1)
def project_imports() -> tuple[Import, ...]:
    modules = _module_files()
    return tuple(imp for module, path in modules.items() for imp in _imports_of(module, path, modules))


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(edges.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return circles


def _floor(module: str) -> int:
    return FLOORS[module.partition(".")[0]]


def test_the_graph_sees_every_kind_of_import():
    """The checks below are only as good as the graph: it has the imports inside functions, the relative ones
    and those that name a submodule with ``from package import module``."""
    imports = project_imports()
    sources = {imp.source for imp in imports}
    assert {"runio.progress", "beamio.beam_options", "pipelines.config", "cli.main"} <= sources
    assert any(imp.in_function for imp in imports)
    modules = _module_files()
    assert _targets(ast.parse("from . import layout").body[0], "runio.files", False, modules) == {"runio.layout"}
    assert _targets(ast.parse("from beamio import read_beam").body[0], "x", False, modules) == {"beamio.read_beam"}
    assert _targets(ast.parse("from beamio.read import resolve_inputs").body[0], "x", False, modules) == {"beamio.read"}


def test_no_import_circle_between_the_projects_modules():
    edges: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], int] = {}
    for imp in project_imports():
        edges[imp.source].add(imp.target)
        where.setdefault((imp.source, imp.target), imp.line)
    messages = []
    for circle in _circles(edges):
        members = set(circle)
        arrows = [f"{a} → {b} (line {where[a, b]})" for a in circle for b in sorted(edges[a]) if b in members]
        messages.append(f"circle of {len(circle)} modules: {', '.join(circle)}\n    " + "\n    ".join(arrows))
    assert not messages, "import circles:\n" + "\n".join(messages)


def test_no_import_from_a_lower_floor_to_a_higher_one():
    upward = [f"{imp.source} (floor {_floor(imp.source)}, line {imp.line}) imports {imp.target} "
              f"(floor {_floor(imp.target)})"
              for imp in project_imports() if _floor(imp.target) > _floor(imp.source)]
    floors = " → ".join(", ".join(p for p in FLOORS if FLOORS[p] == n) for n in sorted(set(FLOORS.values())))
    assert not upward, f"imports that run up the floors ({floors}):\n" + "\n".join(upward)


def test_an_import_of_the_projects_own_modules_inside_a_function_says_why():
    silent = [f"{imp.source}:{imp.line} imports {imp.target} inside a function"
              for imp in project_imports() if imp.in_function and not imp.explained]
    assert not silent, ("imports of the project's own modules inside functions, without a comment saying what "
                        "heavy optional dependency they defer (import at the top instead):\n" + "\n".join(silent))


def test_every_package_has_a_floor_and_is_installed():
    """A top-level package missing from pyproject's package list imports from the checkout (tests, `python -m`)
    but not from the installed `corpusmill` command: `make demo` failed so when `lineage` was added."""
    import tomllib

    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert packages == set(FLOORS), sorted(packages ^ set(FLOORS))
    assert packages == {name.rstrip("*") for name in include}, sorted(packages ^ {n.rstrip("*") for n in include})
