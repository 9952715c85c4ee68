"""`labwarden serve`: the MCP server on stdio (Claude Code, Claude Desktop) or streamable HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from labwarden.cli.common import DEFAULT_LAB, LabOpt, err, fail, fail_on, load_profile
from labwarden.core.errors import LabError
from labwarden.runtime.session import refuse_fleet
from labwarden.server import http
from labwarden.server.app import build_server
from labwarden.server.httpdoor import HttpDoor


def serve(
    lab: LabOpt = DEFAULT_LAB,
    http_bind: Annotated[str | None, typer.Option("--http", help="serve streamable HTTP on HOST:PORT "
                                                  "instead of stdio (loopback unless --token-file)")] = None,
    token_file: Annotated[Path | None, typer.Option(help="bearer token file (chmod 600): one token, "
                                                    "or NAME TOKEN per line (each NAME a principal "
                                                    "of its own); required to bind anything but "
                                                    "loopback")] = None,
    issuer: Annotated[str | None, typer.Option(help="OAuth issuer URL advertised to clients")] = None,
    transcript: Annotated[Path | None, typer.Option(help="transcript database (default: the "
                                                    "lab's data dir)")] = None,
) -> None:
    """Serve every lab tool, resource and prompt over MCP; every call is guarded and logged."""
    profile = load_profile(lab)  # failures go to stderr: on stdio, stdout is the protocol
    try:
        refuse_fleet(profile)  # one server drives one DUT: a fleet's is each place's own profile
    except LabError as exc:
        fail_on(exc, 2)
    if http_bind is None:
        try:
            build_server(profile, client="mcp-stdio", transcript=transcript).run("stdio")
        except BaseException as exc:  # opening the lab failed (a place held, no coordinator...)
            if (lab_error := _lab_error(exc)) is None:
                raise
            fail_on(lab_error)
        return
    try:
        host, port = http.parse_bind(http_bind)
        token = http.read_token(token_file) if token_file else None
        http.check_bind(host, token)
        verifier = http.StaticTokenVerifier(token) if token else None
    except http.ServeError as exc:
        fail_on(exc, 2)
    except OSError as exc:
        fail(str(exc), "check --token-file", 2)
    import uvicorn

    server = build_server(profile, client="mcp-http", transcript=transcript, token_verifier=verifier,
                          auth=http.auth_settings(host, port, issuer) if verifier else None)
    app = HttpDoor(server.streamable_http_app(transport_security=http.security(host, port), host=host),
                   server)
    err.print(f"labwarden MCP on http://{host}:{port}/mcp" + (" (bearer auth)" if verifier else ""))
    uvicorn.run(app, host=host, port=port, log_level="warning")


def _lab_error(exc: BaseException) -> LabError | None:
    """The LabError that stopped the server, also from inside the task groups it runs in (the
    lab opens in its lifespan); None for anything else."""
    if isinstance(exc, LabError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            if (found := _lab_error(sub)) is not None:
                return found
    return None
