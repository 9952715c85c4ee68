"""Streamable HTTP for the MCP server: loopback by default; anything else only with auth.

Requests whose Origin is not the server's own get 403 (DNS-rebinding protection, on for every
bind, not only loopback); without a valid bearer token, 401 with a WWW-Authenticate header.
"""

from __future__ import annotations

import hmac
import ipaddress
from pathlib import Path

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl

from labwarden.core.errors import LabError


class ServeError(LabError):
    """The MCP server cannot start as asked (bind address, token)."""

    kind = "invalid_input"


def parse_bind(bind: str) -> tuple[str, int]:
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ServeError(f"--http {bind!r} is not HOST:PORT", "e.g. --http 127.0.0.1:8765")
    return host.strip("[]") or "127.0.0.1", int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


DEFAULT_CLIENT = "labwarden-bearer"
"""The principal of a token file that holds one bare token."""


class StaticTokenVerifier:
    """Bearer tokens shared out of band (a file only its owner can read): one bare token, or one
    `NAME TOKEN` per line -- each NAME is a principal of its own (`bearer:NAME`), which reads
    only its own sessions' transcripts."""

    def __init__(self, tokens: str | dict[str, str]):
        named = {DEFAULT_CLIENT: tokens} if isinstance(tokens, str) else dict(tokens)
        if not named:
            raise ServeError("the token file holds no token", "one token, or NAME TOKEN per line")
        for name, token in named.items():
            if len(token) < 16:
                raise ServeError(f"the bearer token of {name!r} is shorter than 16 characters",
                                 "generate one: python -c 'import secrets; print(secrets.token_urlsafe(32))'")
        self._tokens = named

    async def verify_token(self, token: str) -> AccessToken | None:
        found = None
        for name, known in self._tokens.items():  # compare with every one: no early exit
            if hmac.compare_digest(token.encode(), known.encode()):
                found = name
        return AccessToken(token=token, client_id=found, scopes=[]) if found else None


def read_token(path: Path) -> dict[str, str]:
    """The tokens of a token file: {principal name: token}."""
    if path.stat().st_mode & 0o077:
        raise ServeError(f"{path} is readable by others", f"chmod 600 {path}")
    lines = [ln.split() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    if len(lines) == 1 and len(lines[0]) == 1:
        return {DEFAULT_CLIENT: lines[0][0]}
    bad = [i + 1 for i, parts in enumerate(lines) if len(parts) != 2]
    if bad or not lines:
        raise ServeError(f"{path}: line(s) {bad or '(none)'} are not NAME TOKEN",
                         "one bare token, or NAME TOKEN per line")
    return {name: token for name, token in lines}


def security(host: str, port: int) -> TransportSecuritySettings:
    hosts = [f"{host}:{port}"] + ([f"localhost:{port}", f"127.0.0.1:{port}"] if is_loopback(host) else [])
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=[f"http://{h}" for h in hosts])


def auth_settings(host: str, port: int, issuer: str | None) -> AuthSettings:
    base = f"http://{host}:{port}"
    return AuthSettings(issuer_url=AnyHttpUrl(issuer or base), resource_server_url=AnyHttpUrl(f"{base}/mcp"))


def check_bind(host: str, token: dict[str, str] | str | None) -> None:
    if not is_loopback(host) and not token:
        raise ServeError(f"refusing to serve MCP on {host} without authentication",
                         "bind 127.0.0.1, or pass --token-file FILE (a bearer token, chmod 600)")
