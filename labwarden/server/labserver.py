"""LabServer: the MCPServer labwarden serves, and the only places it departs from the SDK's
defaults -- registry tools go straight to the runner, `resources/list` lists what the lab holds
now (with the MIME type of each file resource from its suffix), and stdio runs without worker
threads on pipes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio.to_thread
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import InputRequiredResult, Resource, Tool
from pydantic import AnyUrl

from labwarden.server import browse, door, schemas, stdio, tools
from labwarden.tools import registry


class LabServer(MCPServer[Any]):
    """An MCPServer for the lab whose records live in `data_dir`."""

    def __init__(self, data_dir: Path, **settings: Any) -> None:
        # the door logs every tool call and resource read, even those the SDK refuses itself
        settings["middleware"] = [door.middleware, *settings.get("middleware", [])]
        super().__init__(**settings)
        self.data_dir = data_dir
        self.hub: Any = None
        """The lab (runtime.session.LabHub) while the server runs: set by its lifespan."""
        self._published: list[Tool] | None = None

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> Any:
        """Every name goes to the runner -- unknown ones too, so the guard refuses and the
        transcript records them. The runner has validated the arguments and built the output
        from the tool's own model, so MCPServer's second validation and result conversion
        would only add time to every call (bench/tool_overhead.py)."""
        if context is None:
            return await super().call_tool(name, arguments, context)
        return await tools.call(context, name, arguments)

    async def list_tools(self) -> list[Tool]:
        """The registered tools as server/schemas.py publishes them (built once: they do not
        change while the server runs)."""
        if self._published is None:
            self._published = [schemas.tool(registry.TOOLS[t.name]) for t in await super().list_tools()
                               if t.name in registry.TOOLS]
        return self._published

    async def list_resources(self) -> list[Resource]:
        """The registered resources, then the lab's concrete ones (browse.py); read from disk
        in a worker thread, off the event loop that serves tool calls."""
        found = await anyio.to_thread.run_sync(browse.browse, self.data_dir)
        return [*await super().list_resources(), *found]

    async def read_resource(self, uri: AnyUrl | str, context: Context[Any, Any] | None = None
                            ) -> Iterable[ReadResourceContents] | InputRequiredResult:
        """A file resource (flame.svg, stacks.folded, a report) carries its own MIME type: one
        template serves several kinds of file."""
        contents = await super().read_resource(uri, context)
        mime = browse.file_mime(str(uri))
        if mime is None or isinstance(contents, InputRequiredResult):
            return contents
        return [dataclasses.replace(c, mime_type=mime) for c in contents]

    async def run_stdio_async(self) -> None:
        """Serve stdio through server/stdio.py (no worker threads on pipes and sockets)."""
        # the low-level server is the SDK's own attribute; MCPServer.run_stdio_async does this
        async with stdio.stdio_streams() as (read, write):
            await self._lowlevel_server.run(read, write,
                                            self._lowlevel_server.create_initialization_options())
