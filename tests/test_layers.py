"""The package's layers: every import points down, as ``asyncreader/__init__.py`` says.

A module imports only from its own package or from a lower layer; two packages of one layer
do not import each other.

The layer list is read from the comment at the top of ``asyncreader/__init__.py``, so the
comment and the code cannot drift apart: a module outside every listed layer, a listed
name that does not exist, and an import of a higher layer (at the top of a module, inside a
function or under ``TYPE_CHECKING``) all fail here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "asyncreader"
_LAYER_LINE = re.compile(r"^#\s+(\d+)\.\s+(\S.*?)(?:\s{2,}.*)?$")


def parse_layers(init_source: str) -> dict[str, int]:
    """Map each top-level name of the package to its layer, from the layering comment."""
    layers: dict[str, int] = {}
    for line in init_source.splitlines():
        match = _LAYER_LINE.match(line)
        if match:
            for name in match.group(2).split(","):
                layers[name.strip()] = int(match.group(1))
    return layers


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """Every ``asyncreader`` module ``source`` imports, anywhere in it, with its line."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.module is None or target == "asyncreader":
                # ``from . import x``: each name may be a submodule
                found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, target))
    return [(line, name) for line, name in found if name.split(".")[0] == "asyncreader"]


def top_name(module: str) -> str:
    """The package's top-level name a module belongs to (``_queues`` for its modules)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    name = top_name(module)
    if name == "__init__":
        return max(layers.values()) + 1  # the front door sits above everything
    return layers.get(name)


def upward_imports(root: Path, layers: dict[str, int]) -> list[str]:
    """Every import of ``root``'s modules that points to a higher layer, as messages."""
    problems: list[str] = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        mine = layer_of(module, layers)
        if mine is None:
            problems.append(f"{module}: in no layer of the layering comment")
            continue
        for line, target in imports_of(path.read_text(), module, path.name == "__init__.py"):
            name = top_name(target)
            if name != "__init__" and not (
                (root / f"{name}.py").exists() or (root / name).is_dir()
            ):
                target = "asyncreader"  # ``from .. import X``: a name of the front door
            if top_name(target) == top_name(module):
                continue
            theirs = layer_of(target, layers)
            if theirs is None:
                problems.append(f"{module}:{line} imports {target}, which is in no layer")
            elif theirs >= mine:
                problems.append(
                    f"{module}:{line} imports {target} (layer {theirs}, not below {mine})"
                )
    return problems


def test_the_layering_comment_names_what_exists() -> None:
    layers = parse_layers((PACKAGE / "__init__.py").read_text())
    assert len(layers) >= 10, layers
    missing = [
        name
        for name in layers
        if not (PACKAGE / f"{name}.py").exists() and not (PACKAGE / name).is_dir()
    ]
    assert missing == [], f"layers name modules that do not exist: {missing}"


def test_every_import_points_down() -> None:
    layers = parse_layers((PACKAGE / "__init__.py").read_text())
    assert upward_imports(PACKAGE, layers) == []


@pytest.mark.parametrize(
    ("where", "code"),
    [
        ("top", "from .._readers.base import ReaderBase\n"),
        ("function", "def f():\n    from .. import FIFOQueue\n"),
        (
            "type checking",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from asyncreader._pipeline import batching\n",
        ),
        ("higher module", "from .. import cifar10\n"),
        ("same layer", "from .._peer import thing\n"),
    ],
)
def test_an_upward_import_is_caught(tmp_path: Path, where: str, code: str) -> None:
    root = tmp_path / "asyncreader"
    (root / "_queues").mkdir(parents=True)
    for name in ("_readers", "_pipeline", "_peer"):
        (root / name).mkdir()
        (root / name / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "cifar10.py").write_text("")
    (root / "_queues" / "__init__.py").write_text("")
    (root / "_queues" / "fifo.py").write_text(code)
    layers = {"_queues": 6, "_peer": 6, "_readers": 7, "_pipeline": 8, "cifar10": 9}
    problems = upward_imports(root, layers)
    assert len(problems) == 1, (where, problems)
    assert problems[0].startswith("asyncreader._queues.fifo:"), problems


def test_a_module_outside_every_layer_is_caught(tmp_path: Path) -> None:
    root = tmp_path / "asyncreader"
    (root / "_new").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "_new" / "__init__.py").write_text("")
    assert upward_imports(root, {"_queues": 6}) == [
        "asyncreader._new: in no layer of the layering comment"
    ]


def test_downward_and_same_package_imports_pass(tmp_path: Path) -> None:
    root = tmp_path / "asyncreader"
    (root / "_queues").mkdir(parents=True)
    (root / "_runtime").mkdir()
    (root / "__init__.py").write_text("from ._queues import fifo\n")
    (root / "_runtime" / "__init__.py").write_text("")
    (root / "_queues" / "__init__.py").write_text("")
    (root / "_queues" / "fifo.py").write_text(
        "from .._runtime import context\nfrom . import base\nfrom .base import QueueBase\n"
    )
    assert upward_imports(root, {"_runtime": 5, "_queues": 6}) == []
