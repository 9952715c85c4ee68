"""Publish labwarden's prompts (labwarden/prompts/*.md) as MCP prompts."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.prompts.base import Prompt, PromptArgument, UserMessage

from labwarden.prompts import PromptFile, all_prompts


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
