"""The code's layout, kept: floors whose imports only point down, one concept per (short) module, a
declared public line, and tests that share builders rather than import each other.

The floors are docs/contributing.md's table. An import inside a function counts as much as one at the
top (a lazy import is still a dependency); only ``if TYPE_CHECKING:`` imports are exempt from the floors.
A package's private modules (``_name.py``) are its own: every other package goes through its facade,
``if TYPE_CHECKING:`` imports included (an annotation is a reach too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "harvester"
FLOORS = {
    0: ["errors", "canonical", "_files", "_progress", "_lazy"],
    1: ["model", "spans", "config", "seam", "_threads"],
    2: ["conventions", "redact", "checks", "instrument"],
    3: ["store"],
    4: ["intake", "case", "suite", "report"],
    5: ["harvest", "fixtures", "adapters"],
    6: ["replay", "shadow"],
    7: ["cli", "pytest_plugin", "demo", "__main__"],
}
FLOOR = {name: floor for floor, names in FLOORS.items() for name in names}
# The one documented call up: the store settles its inbox with the intake's normalizer unless handed one.
ALLOWED_UP = {("store/_settling.py", "intake")}
# Reaches into another package's private module, each with why it must stay.
PRIVATE_REACHES: dict[tuple[str, str], str] = {}  # (module, private module it may import): why
MAX_LINES = 400


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _imports(path: Path, *, typing: bool = False) -> list[tuple[str, int]]:
    """(harvester module imported, line) for every import in ``path`` outside ``if TYPE_CHECKING:``
    (``typing``: inside it too)."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if not typing and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    package = ["harvester", *path.relative_to(PACKAGE).parts[:-1]]  # what a relative import is relative to
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                names = [node.module] if node.module else [a.name for a in node.names]
                modules = [".".join([*base, n]) for n in names]
            elif node.module and node.module.split(".")[0] == "harvester":
                modules = [node.module]
            else:
                continue
            if node.module:  # ``from ..report import _html``: a private name (or module) of that package
                modules += [f"{modules[0]}.{a.name}" for a in node.names if a.name.startswith("_")]
            out += [(m, node.lineno) for m in modules]
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "harvester"]
    return out


def _top(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "harvester" else None


def test_every_module_has_a_floor():
    tops = {p.relative_to(PACKAGE).with_suffix("").parts[0] for p in _modules()} - {"__init__"}
    assert tops <= set(FLOOR), f"give these a floor in docs/contributing.md and here: {sorted(tops - set(FLOOR))}"


def test_imports_only_point_down():
    up = []
    for path in _modules():
        rel = path.relative_to(PACKAGE)
        me = rel.with_suffix("").parts[0]
        if me == "__init__":
            continue  # the facade re-exports lazily from every floor
        for module, line in _imports(path):
            other = _top(module)
            if other is None or other == me:
                continue
            if FLOOR[other] > FLOOR[me] and (rel.as_posix(), other) not in ALLOWED_UP:
                up.append(f"{rel}:{line} (floor {FLOOR[me]}) imports {module} (floor {FLOOR[other]})")
    assert not up, "imports pointing up:\n" + "\n".join(up)


def test_the_store_imports_nothing_above_model_and_spans():
    above = [
        f"{p.relative_to(PACKAGE)}:{line} imports {module}"
        for p in sorted((PACKAGE / "store").glob("*.py"))
        for module, line in _imports(p)
        if _top(module) not in (None, "store")
        and FLOOR[_top(module)] > 1  # type: ignore[index]
        and (p.relative_to(PACKAGE).as_posix(), _top(module)) not in ALLOWED_UP
    ]
    assert not above, "\n".join(above)


def test_the_floor_test_catches_an_import_pointing_up(tmp_path):
    """The scan reads relative imports, function-level imports and absolute ones alike."""
    probe = PACKAGE / "store" / "_probe_for_the_layout_test.py"
    probe.write_text("def f():\n    from ..replay import replay\n    from harvester.cli import main\n")
    try:
        found = {_top(m) for m, _ in _imports(probe)}
    finally:
        probe.unlink()
    assert found == {"replay", "cli"}


def _private_home(module: str) -> str | None:
    """The package whose private module ``module`` is (``harvester.report`` for ``harvester.report._otel``);
    None for a public one."""
    parts = module.split(".")
    for i, part in enumerate(parts[1:], 1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def _private_reaches(path: Path) -> list[tuple[str, int]]:
    """(private module of another package, line) for every such import in ``path``."""
    me = ".".join(["harvester", *path.relative_to(PACKAGE).with_suffix("").parts])
    return [
        (module, line)
        for module, line in _imports(path, typing=True)
        if (home := _private_home(module)) is not None and not me.startswith(home + ".")
    ]


def test_no_module_reaches_into_another_packages_private_modules():
    """``harvester.intake._assembly`` may import ``harvester.intake._pipeline`` (and ``harvester._files``:
    every module is inside ``harvester``), never ``harvester.report._otel``: that goes through
    ``harvester.report``, whose ``__all__`` says what the package offers."""
    found = {(p.relative_to(PACKAGE).as_posix(), m): line for p in _modules() for m, line in _private_reaches(p)}
    reaches = [
        f"{rel}:{line} imports {m}: use its package's facade"
        for (rel, m), line in found.items()
        if (rel, m) not in PRIVATE_REACHES
    ]
    assert not reaches, "\n".join(reaches)
    assert set(PRIVATE_REACHES) <= set(found), f"no longer needed: {sorted(set(PRIVATE_REACHES) - set(found))}"


def test_the_private_module_test_catches_a_reach(tmp_path):
    """Relative, absolute, function-level and ``TYPE_CHECKING`` imports alike; a package's own are fine."""
    probe = PACKAGE / "cli" / "_probe_for_the_layout_test.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import _emit\n"
        "from .._files import write_file\n"
        "if TYPE_CHECKING:\n    from ..report._otel import EmitResult\n"
        "def f():\n    from harvester.store._codec import PACKED\n    from ..report import _html\n"
    )
    try:
        found = {m for m, _ in _private_reaches(probe)}
    finally:
        probe.unlink()
    assert found == {"harvester.report._otel", "harvester.store._codec", "harvester.report._html"}


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_are_short_and_declare_their_public_names(path):
    lines = path.read_text().count("\n")
    assert lines <= MAX_LINES, f"{path.relative_to(PACKAGE)} has {lines} lines: split it by concept"
    if path.name not in ("__init__.py", "__main__.py"):
        assert "\n__all__ = [" in path.read_text(), f"{path.relative_to(PACKAGE)} declares no __all__"


def test_no_test_module_imports_another():
    """Shared helpers live in tests/builders, tests/frameworks and tests/apps, never in a test module."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(n.split(".")[-1].startswith("test_") for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_the_contributing_page_shows_these_floors():
    """docs/contributing.md's table is the one a newcomer reads: it must be the one enforced here."""
    import re

    page = (ROOT / "docs" / "contributing.md").read_text()
    rows = re.findall(r"^\| (\d) \| (.+?) \|", page, re.M)
    shown = {int(floor): sorted(n.strip("`/") for n in re.findall(r"`[^`]+`", names)) for floor, names in rows}
    assert shown == {floor: sorted(names) for floor, names in FLOORS.items()}
