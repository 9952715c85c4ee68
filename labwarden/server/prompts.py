"""Publish labwarden's prompts (labwarden/prompts/*.md) as MCP prompts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.prompts.base import Prompt, PromptArgument, UserMessage

from labwarden.prompts import PromptFile, all_prompts


def register(server: MCPServer[Any], tools: Collection[str]) -> None:
    """Every prompt, rendered for a lab whose listed tools are `tools`."""
    for pf in all_prompts():
        def make(pf: PromptFile) -> Callable[..., Awaitable[list[UserMessage]]]:
            async def fn(**kwargs: str) -> list[UserMessage]:
                return [UserMessage(pf.render(tools, **kwargs))]
            return fn
        server.add_prompt(Prompt(
            name=pf.name, description=pf.description,
            arguments=[PromptArgument(name=a["name"], description=a.get("description"), required=False)
                       for a in pf.arguments],
            fn=make(pf)))
