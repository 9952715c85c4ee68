"""Generated documentation: the README's tool table comes from the registry, and a test fails
when it is stale. Regenerate with `python -m labwarden.docgen` (rewrites README.md in place)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from labwarden.tools import registry

START, END = "<!-- tools:start -->", "<!-- tools:end -->"
README = Path(__file__).resolve().parent.parent / "README.md"


def tools_table() -> str:
    rows = ["| command | effect | requires | what it does |", "| --- | --- | --- | --- |"]
    for spec in registry.TOOLS.values():
        req = ", ".join(sorted(spec.requires)) or "-"
        rows.append(f"| `labwarden call {spec.name}` | {spec.effect} | {req} | "
                    f"{spec.description.replace('|', '/')} |")
    return "\n".join(rows)


def render(readme: str) -> str:
    block = f"{START}\n{tools_table()}\n{END}"
    return re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _m: block, readme, flags=re.S)


def main() -> int:
    text = README.read_text()
    new = render(text)
    if new != text:
        README.write_text(new)
        print("README.md: tool table regenerated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
