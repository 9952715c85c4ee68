#!/usr/bin/env python3
"""Write the generated documentation from the code: docs/reference/tools.md (every tool's spec
and schema), docs/reference/lab-toml.md (every lab.toml key), docs/reference/cli.md (every
command's --help) and README.md's list of tools (labwarden/docgen.py renders each).

    scripts/gen-reference.py           rewrite what is stale
    scripts/gen-reference.py --check   change nothing; exit 1 naming each stale file (the tests do)
"""

from __future__ import annotations

import os
import sys

# what a command's --help shows as a default must not depend on who generates the page
for var in ("LABWARDEN_LAB", "LABWARDEN_TRANSCRIPTS", "COLUMNS", "TERMINAL_WIDTH"):
    os.environ.pop(var, None)
os.environ["TYPER_USE_RICH"] = "0"  # click's plain layout: the same text, without rich's boxes

import typer.main  # noqa: E402

from labwarden import docgen  # noqa: E402
from labwarden.cli.app import app  # noqa: E402


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, text in docgen.reference_pages(typer.main.get_command(app)).items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for path in stale:
        rel = path.relative_to(docgen.ROOT)
        print(f"{rel}: {'stale (run scripts/gen-reference.py)' if check else 'written'}",
              file=sys.stderr)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
