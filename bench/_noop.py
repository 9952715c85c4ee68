"""A no-op tool for the overhead benches, and the two stdio servers that serve it.

    python bench/_noop.py labwarden LAB_TOML [TRANSCRIPT_DB]   # labwarden's server + guard + transcript
    python bench/_noop.py bare                                  # a bare MCPServer, same tool
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, Field

from labwarden.tools.spec import ToolSpec


class NoopInput(BaseModel):
    n: int = Field(0, ge=0, description="echoed back")


class NoopOutput(BaseModel):
    n: int


async def noop(ctx: object, inp: NoopInput) -> NoopOutput:
    return NoopOutput(n=inp.n)


SPEC = ToolSpec(name="noop", description="does nothing (benchmark)", input=NoopInput,
                output=NoopOutput, run=noop, effect="read_only", idempotent=True)


def register() -> None:
    from labwarden.tools import registry

    registry.TOOLS.setdefault("noop", SPEC)


def main() -> None:
    if sys.argv[1] == "bare":
        from mcp.server.mcpserver import MCPServer

        server = MCPServer(name="bare", log_level="WARNING")

        @server.tool(name="noop", structured_output=True)
        async def noop_tool(n: int = 0) -> NoopOutput:
            return NoopOutput(n=n)

        server.run("stdio")
    else:
        register()
        from labwarden.lab.profile import LabProfile
        from labwarden.server.app import build_server

        transcript = Path(sys.argv[3]) if len(sys.argv) > 3 else None
        build_server(LabProfile.from_file(sys.argv[2]), transcript=transcript,
                     client="bench").run("stdio")


if __name__ == "__main__":
    main()
