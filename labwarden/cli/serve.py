"""`labwarden serve`: the MCP server on stdio (Claude Code, Claude Desktop) or streamable HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from labwarden.cli.common import DEFAULT_LAB, LabOpt, load_profile
from labwarden.server import http
from labwarden.server.app import build_server

err = Console(stderr=True)  # never stdout: on stdio, stdout is the protocol


def serve(
    lab: LabOpt = DEFAULT_LAB,
    http_bind: Annotated[str | None, typer.Option("--http", help="serve streamable HTTP on HOST:PORT "
                                                  "instead of stdio (loopback unless --token-file)")] = None,
    token_file: Annotated[Path | None, typer.Option(help="bearer token file (chmod 600); required "
                                                    "to bind anything but loopback")] = None,
    issuer: Annotated[str | None, typer.Option(help="OAuth issuer URL advertised to clients")] = None,
    transcript: Annotated[Path | None, typer.Option(help="transcript database (default: the "
                                                    "lab's data dir)")] = None,
) -> None:
    """Serve every lab tool, resource and prompt over MCP; every call is guarded and logged."""
    profile = load_profile(lab, err)
    if http_bind is None:
        build_server(profile, client="mcp-stdio", transcript=transcript).run("stdio")
        return
    try:
        host, port = http.parse_bind(http_bind)
        token = http.read_token(token_file) if token_file else None
        http.check_bind(host, token)
        verifier = http.StaticTokenVerifier(token) if token else None
    except (http.ServeError, OSError) as exc:
        problem, remedy = (exc.problem, exc.remedy) if isinstance(exc, http.ServeError) \
            else (str(exc), "check --token-file")
        err.print(f"[red]error:[/red] {escape(problem)}\n[yellow]remedy:[/yellow] {escape(remedy)}")
        raise typer.Exit(2) from None
    import uvicorn

    server = build_server(profile, client="mcp-http", transcript=transcript, token_verifier=verifier,
                          auth=http.auth_settings(host, port, issuer) if verifier else None)
    app = server.streamable_http_app(transport_security=http.security(host, port), host=host)
    err.print(f"labwarden MCP on http://{host}:{port}/mcp" + (" (bearer auth)" if verifier else ""))
    uvicorn.run(app, host=host, port=port, log_level="warning")
