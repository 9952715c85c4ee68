"""The prompts, as markdown files beside this module: a small front matter (description, arguments
with defaults) and a jinja2 body: `{{ argument }}`, and `{% if "bisect" in tools %}` around what
needs a tool the lab may not list (lab/features.py), so a prompt never names a tool its lab
lacks. Files, so people can edit them without code; the MCP server publishes them
(server/prompts.py) and the agent uses two as system prompts."""

from __future__ import annotations

from collections.abc import Collection
from importlib import resources
from pathlib import Path

import jinja2
import yaml
from pydantic import BaseModel

_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                          trim_blocks=True, lstrip_blocks=True, autoescape=False)


class PromptFile(BaseModel):
    name: str
    description: str
    arguments: list[dict[str, str]]
    body: str

    def render(self, tools: Collection[str], **args: str | None) -> str:
        """The prompt for a lab whose listed tools are `tools`, with its arguments (each
        defaulted from the front matter)."""
        values = {a["name"]: args.get(a["name"]) or a.get("default", "") for a in self.arguments}
        return _ENV.from_string(self.body).render(tools=frozenset(tools), **values)


def prompt_dir() -> Path:
    return Path(str(resources.files("labwarden.prompts")))


def load(path: Path) -> PromptFile:
    text = path.read_text()
    _, front, body = text.split("---", 2)
    meta = yaml.safe_load(front)
    return PromptFile(name=path.stem, description=meta["description"],
                      arguments=meta.get("arguments", []), body=body.strip() + "\n")


def named(name: str) -> PromptFile:
    """One prompt by its file name without .md (e.g. `overnight-loop`)."""
    return load(prompt_dir() / f"{name}.md")


def all_prompts() -> list[PromptFile]:
    return [load(p) for p in sorted(prompt_dir().glob("*.md"))]
