"""qlabd's control socket: one JSON request per connection, one JSON reply when it is done.

The socket (run/qlabd.sock, mode 0600) is how a process other than qlabd moves the qlab's
labgrid target without a QEMUDriver of its own: labwarden's QlabdStrategy (remote.py) asks for
`off`, `shell`, `cycle` (off, then shell) or `flash` (off, write an image to the flash disk,
shell); `state` answers at once. Requests are a closed set (`Request`); the reply says `ok`, the
daemon's state (its boot_id after a boot) and, if not ok, the error.

Signals (daemon.py) stay for `qlab down` and the CLI's transitions: they need no reply.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from labwarden.core.errors import LabError

MAX_REQUEST = 64 << 10


class Request(BaseModel, extra="forbid"):
    """What a client may ask qlabd."""

    op: Literal["state", "off", "shell", "cycle", "flash"]
    image: str | None = Field(None, description="flash: the firmware image (qlab flash format) "
                              "to write to the flash disk; it must lie inside the qlab's dir")


class Reply(BaseModel):
    ok: bool
    error: str | None = None
    state: dict[str, Any] = Field(default_factory=dict, description="the daemon's state.json")


class ControlError(LabError):
    """qlabd could not be asked, or refused / failed the request."""

    kind = "device"


@dataclass
class Pending:
    """A request the daemon's main thread handles; `done(reply)` answers the client."""

    request: Request
    conn: socket.socket
    answered: threading.Event = field(default_factory=threading.Event)

    def done(self, reply: Reply) -> None:
        with contextlib.suppress(OSError):  # the client gave up: nothing to tell
            self.conn.sendall(reply.model_dump_json().encode() + b"\n")
        with contextlib.suppress(OSError):
            self.conn.close()
        self.answered.set()


class Server:
    """Accepts requests on `path` in a thread; `state` is answered there, the rest queued for the
    thread that owns the labgrid target (labgrid drivers are not thread-safe)."""

    def __init__(self, path: Path, state: Any):
        self.path = path
        self.state = state  # a callable returning the daemon's current state dict
        self.queue: queue.Queue[Pending] = queue.Queue()
        path.unlink(missing_ok=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # 0600 from the start: a flash request is root's business
        try:
            self.sock.bind(str(path))
        finally:
            os.umask(old)
        self.sock.listen(4)
        self.thread = threading.Thread(target=self._serve, name="qlabd-control", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            try:
                request = Request.model_validate_json(_read_line(conn))
            except (OSError, ValueError, ValidationError) as exc:
                Pending(Request(op="state"), conn).done(Reply(ok=False, error=f"bad request: {exc}"))
                continue
            pending = Pending(request, conn)
            if request.op == "state":
                pending.done(Reply(ok=True, state=self.state()))
            else:
                self.queue.put(pending)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        self.path.unlink(missing_ok=True)
        while not self.queue.empty():  # left unhandled: say so rather than leave clients hanging
            self.queue.get_nowait().done(Reply(ok=False, error="qlabd stopped"))


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            raise ValueError("request too long")
    return data


def ask(path: str | os.PathLike[str], request: Request, timeout: float) -> Reply:
    """Send `request` to qlabd at `path` and wait (up to `timeout` s) for its reply."""
    remedy = "is the qlab up? `labwarden qlab status --dir QLAB_DIR`; see its logs/qlabd.log"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(request.model_dump_json().encode() + b"\n")
            raw = _read_line(sock)
    except TimeoutError as exc:
        raise ControlError(f"qlabd did not answer `{request.op}` within {timeout:g} s", remedy,
                           kind="timeout") from exc
    except OSError as exc:
        raise ControlError(f"cannot ask qlabd at {path}: {exc.strerror or exc}", remedy) from exc
    if not raw:
        raise ControlError(f"qlabd closed the connection during `{request.op}` (it stopped?)", remedy)
    try:
        return Reply.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        raise ControlError(f"qlabd sent an unreadable reply to `{request.op}`", remedy) from exc
