"""MCP prompts from labwarden/prompts/*.md: a small front matter (description, arguments with
defaults) and a body with {placeholders}. Files, so people can edit them without code."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.prompts.base import Prompt, PromptArgument, UserMessage
from pydantic import BaseModel


class PromptFile(BaseModel):
    name: str
    description: str
    arguments: list[dict[str, str]]
    body: str

    def render(self, **args: str | None) -> str:
        values = {a["name"]: args.get(a["name"]) or a.get("default", "") for a in self.arguments}
        return self.body.format(**values)


def prompt_dir() -> Path:
    return Path(str(resources.files("labwarden") / "prompts"))


def load(path: Path) -> PromptFile:
    text = path.read_text()
    _, front, body = text.split("---", 2)
    meta = yaml.safe_load(front)
    return PromptFile(name=path.stem, description=meta["description"],
                      arguments=meta.get("arguments", []), body=body.strip() + "\n")


def all_prompts() -> list[PromptFile]:
    return [load(p) for p in sorted(prompt_dir().glob("*.md"))]


def register(server: MCPServer[Any]) -> None:
    for pf in all_prompts():
        def make(pf: PromptFile):  # type: ignore[no-untyped-def]
            async def fn(**kwargs: str) -> list[UserMessage]:
                return [UserMessage(pf.render(**kwargs))]
            return fn
        server.add_prompt(Prompt(
            name=pf.name, description=pf.description,
            arguments=[PromptArgument(name=a["name"], description=a.get("description"), required=False)
                       for a in pf.arguments],
            fn=make(pf)))
