"""Client of stad's line RPC over its unix socket (`METHOD args\\n` -> `OK n\\n<payload>` | `ERR msg`)."""

from __future__ import annotations

import socket
from pathlib import Path


class RpcError(RuntimeError):
    pass


def call(sock_path: Path, request: str, timeout: float = 5.0) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(str(sock_path))
        except OSError as exc:
            raise RpcError(f"stad is not answering on {sock_path}: {exc.strerror or exc}") from exc
        s.sendall(request.encode() + b"\n")
        buf = b""
        while b"\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise RpcError(f"stad closed the connection during {request!r}")
            buf += chunk
        head, _, rest = buf.partition(b"\n")
        if head.startswith(b"ERR"):
            raise RpcError(head[4:].decode(errors="replace"))
        if not head.startswith(b"OK "):
            raise RpcError(f"unexpected reply {head[:80]!r}")
        size = int(head[3:])
        while len(rest) < size:
            chunk = s.recv(65536)
            if not chunk:
                break
            rest += chunk
        return rest[:size].decode(errors="replace")


def count(sock_path: Path) -> dict[str, int]:
    """The datamodel's AssociatedDevice count: {'total': N, 'vap0': a, ...}."""
    return {k: int(v) for k, v in (kv.split("=", 1) for kv in call(sock_path, "count").split())}
