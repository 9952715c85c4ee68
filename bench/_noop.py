"""A no-op tool for the overhead benches, and the two stdio servers that serve it.

    python bench/_noop.py labwarden LAB_TOML [TRANSCRIPT_DB [FSYNC]]   # labwarden's server + guard +
                                                                  # transcript ([policy] transcript_fsync)
    python bench/_noop.py labwarden-sdk-stdio LAB_TOML [...]    # the same on the SDK's stdio transport
    python bench/_noop.py bare                                  # a bare MCPServer, same tool
    python bench/_noop.py layer LAB_TOML TRANSCRIPT_DB          # labwarden's server with the runner
                                                                  # short-cut: its MCP layer alone
"""

from __future__ import annotations

import sys
from pathlib import Path

# the servers run as `python bench/_noop.py`, with the SDK's filtered environment (no
# PYTHONPATH): put this checkout first, so they serve the labwarden the bench itself imports
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydantic import BaseModel, Field

from labwarden.core.spec import ToolSpec
from labwarden.lab.config import LabProfile


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
        from labwarden.server.app import build_server

        if sys.argv[1].startswith("layer"):
            _short_cut_runner()

        transcript = Path(sys.argv[3]) if len(sys.argv) > 3 else None
        server = build_server(with_fsync(LabProfile.from_file(sys.argv[2]), *sys.argv[4:5]),
                              transcript=transcript, client="bench")
        if sys.argv[1].endswith("-sdk-stdio"):  # the SDK's threaded transport, as the bare server
            import anyio
            from mcp.server.mcpserver import MCPServer

            anyio.run(MCPServer.run_stdio_async, server)
        else:
            server.run("stdio")


def _short_cut_runner() -> None:
    """Replace the runner (validation, guard, transcript) in the server by a direct call."""
    from labwarden.core.call import ToolCallRecord
    from labwarden.runtime import request_mark
    from labwarden.server import tools

    async def direct(ctx: object, name: str, args: dict) -> ToolCallRecord:  # type: ignore[type-arg]
        request_mark.logged()  # as the runner does: else the MCP door logs the call as refused
        out = NoopOutput(n=args.get("n", 0))
        return ToolCallRecord(tool=name, args=args, ok=True, result=out.model_dump(), output=out,
                              result_json=out.model_dump_json())

    tools.call_tool = direct  # type: ignore[assignment]


def with_fsync(profile: LabProfile, mode: str = "changes") -> LabProfile:
    """The profile with [policy] transcript_fsync set (the benches compare both)."""
    policy = profile.policy.model_copy(update={"transcript_fsync": mode})
    return profile.model_copy(update={"policy": policy})


if __name__ == "__main__":
    main()
