"""User code is type-checked the way users check it: ``mypy --strict``.

The documentation's complete programs (found as tests/test_docs_examples.py finds them),
examples/ and tests/typecheck/public_types.py (``assert_type`` checks of the public surface)
are copied into a temporary directory and checked with ``mypy --strict`` and no project
configuration, so the library's own relaxations for its tests do not apply. One mypy run
checks them all (about 10 s).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api as mypy_api  # in the test extra: a missing mypy fails, not skips

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _docs_programs() -> dict[str, str]:
    found = {}
    for page in sorted((ROOT / "docs").rglob("*.md")):
        blocks = _BLOCK.findall(page.read_text(encoding="utf-8"))
        for i, code in enumerate(blocks):
            if "anyio.run(" in code or "trio.run(" in code or code.startswith("# runnable"):
                stem = re.sub(r"\W", "_", str(page.relative_to(ROOT / "docs"))[: -len(".md")])
                found[f"docs_{stem}_{i}.py"] = code
    return found


def _mypy_strict(files: list[Path], tmp_path: Path) -> tuple[str, int]:
    config = tmp_path / "mypy.ini"
    # torch and JAX are optional: their types are Any, whether or not they are installed
    # (and their large packages are not analysed).
    config.write_text(
        "[mypy]\n"
        "[mypy-torch.*,jax.*]\nignore_missing_imports = True\nfollow_imports = skip\n"
        "[mypy-torch,jax]\nignore_missing_imports = True\nfollow_imports = skip\n"
    )
    stdout, stderr, status = mypy_api.run(
        [
            "--strict",
            "--config-file",
            str(config),
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            "--no-error-summary",
            *map(str, files),
        ]
    )
    return stdout + stderr, status


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``{file name: mypy's messages about it}`` after one ``mypy --strict`` run over all."""
    tmp_path = tmp_path_factory.mktemp("typing")
    sources = _docs_programs()
    checked_files = [
        *sorted((ROOT / "examples").glob("*.py")),
        ROOT / "tests/typecheck/public_types.py",
    ]
    for path in checked_files:
        sources[path.name] = path.read_text(encoding="utf-8")
    # One directory per file: the programs are separate scripts, not one package.
    files = []
    for name, code in sources.items():
        (tmp_path / name[:-3]).mkdir()
        files.append(tmp_path / name[:-3] / name)
        files[-1].write_text(code, encoding="utf-8")
    output, status = _mypy_strict(files, tmp_path)
    messages = dict.fromkeys(sources, "")
    for line in output.splitlines():
        name = Path(line.split(":", 1)[0]).name
        messages[name if name in messages else "<other>"] = messages.get(name, "") + line + "\n"
    assert status == 0 or any(messages.values()), output
    return messages


def test_docs_programs_and_examples_pass_mypy_strict(checked: dict[str, str]) -> None:
    assert len([name for name in checked if name.startswith("docs_")]) > 10
    failing = {name: text for name, text in checked.items() if text and name != "public_types.py"}
    assert failing == {}


def test_public_types_are_precise(checked: dict[str, str]) -> None:
    assert checked["public_types.py"] == ""
