"""Layering: the terminal (typer, rich) belongs to labwarden/cli/ alone; every library package is
usable without it. Read from the source with `ast`, so a comment or a string never counts and an
import inside a function does."""

from __future__ import annotations

import ast
from pathlib import Path

import labwarden

PACKAGE = Path(labwarden.__file__).resolve().parent
TERMINAL = {"typer", "rich", "click"}


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def test_library_packages_import_no_terminal_code() -> None:
    modules = [p for p in PACKAGE.rglob("*.py") if (PACKAGE / "cli") not in p.parents]
    assert len(modules) > 50 and PACKAGE / "agent" / "overnight.py" in modules
    offenders = [f"{p.relative_to(PACKAGE.parent)}:{line}: import {name}"
                 for p in modules for line, name in _imports(p)
                 if name.split(".")[0] in TERMINAL]
    assert offenders == [], "library code imports the terminal layer:\n" + "\n".join(offenders)


def test_the_check_sees_what_it_must(tmp_path: Path) -> None:
    """Imports inside a function, dotted and aliased ones are found; text that only mentions a
    module is not (so the empty result above means something)."""
    src = tmp_path / "m.py"
    src.write_text('"""import typer"""\nimport rich.table as t\n\n\ndef f() -> None:\n'
                   '    from typer.testing import CliRunner  # noqa\n    x = "from click import echo"\n')
    assert _imports(src) == [(2, "rich.table"), (6, "typer.testing")]
