"""Read and write OpenWrt UCI config files (the DUT's etc/config/*).

Hand-written because the only library (libuci's Python binding) needs the C library on the host;
this covers the subset OpenWrt files use: `config TYPE 'NAME'` and `option KEY 'VALUE'` lines.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from labwarden.core.errors import LabError


@dataclass
class Section:
    type: str
    name: str
    options: dict[str, str] = field(default_factory=dict)


class UciError(LabError):
    """A line that is not UCI; the problem names the file and line."""

    kind = "device"

    def __init__(self, problem: str):
        super().__init__(problem, "fix that line of the DUT's config file (UCI syntax)")


def parse(text: str, source: str = "<uci>") -> list[Section]:
    sections: list[Section] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise UciError(f"{source}:{lineno}: {exc}: {raw!r}") from exc
        if words[0] == "config" and len(words) in (2, 3):
            sections.append(Section(words[1], words[2] if len(words) == 3 else ""))
        elif words[0] == "option" and len(words) == 3 and sections:
            sections[-1].options[words[1]] = words[2]
        else:
            raise UciError(f"{source}:{lineno}: expected `config TYPE 'NAME'` or "
                           f"`option KEY 'VALUE'`, got {raw!r}")
    return sections


def dumps(sections: list[Section]) -> str:
    out: list[str] = []
    for sec in sections:
        out.append(f"config {sec.type} '{sec.name}'" if sec.name else f"config {sec.type}")
        out.extend(f"\toption {k} '{v}'" for k, v in sec.options.items())
        out.append("")
    return "\n".join(out)


def load(path: Path) -> list[Section]:
    return parse(path.read_text(), str(path))


def save(path: Path, sections: list[Section]) -> None:
    """Write atomically: a reader (stad at start, a guard check) never sees half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(dumps(sections))
    tmp.replace(path)


def get(sections: list[Section], name: str) -> Section:
    for sec in sections:
        if sec.name == name:
            return sec
    raise KeyError(name)
