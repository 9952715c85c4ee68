"""MCP over stdio without threads, when stdin and stdout are pipes or sockets.

The SDK's stdio transport reads each line and writes each reply in anyio worker threads. Per
request that is two thread hand-offs, and while a tool call runs, the thread woken to read the
next line competes with it for the GIL: every call that releases the GIL (sqlite's commit, a
stat, os.urandom) hands it over and waits to get it back. On a pipe or a socket asyncio reads
and writes the same descriptors from the event loop itself; the framing (one JSON-RPC message
per line, UTF-8, undecodable bytes replaced) and the parsing stay the SDK's (`stdio_server`
with these streams), after one cut: JSON nested past core/nesting.WIRE_DEPTH never reaches the
parser (the runner refuses the call `too_deep` instead of the SDK dropping it unanswered).
bench/tool_overhead.py measures both transports side by side.

Like the SDK, it claims the descriptors while it serves: fd 0 reads /dev/null and fd 1 writes
to stderr, so a stray print or a child process cannot corrupt the protocol; both are restored
afterwards. Anything else (a file, a terminal: descriptors shared with a shell, which
non-blocking mode would disturb; Windows) keeps the SDK's transport, its lines cut the same way
and its end of input held until every request read was answered (a file's EOF is not a client
that left).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import stat
import sys
from collections.abc import AsyncIterator
from typing import Any, Self

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

from labwarden.core.nesting import clip_text

if sys.platform != "win32":
    import fcntl

LINE_LIMIT = 256 << 20
"""Longest message line read (bytes); the SDK's reader has no limit, and none comes near."""


def _pipe_or_socket(fd: int) -> bool:
    if sys.platform == "win32":  # asyncio has no pipe transports for the std handles there
        return False
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class _Lines:
    """stdin as the SDK's stdio_server iterates it: text lines."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        # cut past core/nesting.WIRE_DEPTH before the SDK's parser sees it: that parser fails
        # at 200 levels, and the SDK then answers nothing; cut, the runner refuses and logs it
        return clip_text(line.decode("utf-8", errors="replace"))


class _Replies:
    """stdout as the SDK's stdio_server writes it: write(text), then flush()."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode())

    async def flush(self) -> None:
        await self._writer.drain()  # waits only while the pipe is full


class _ClippedLines:
    """The SDK's own threaded reader of stdin (a file, a terminal), each line cut as _Lines does."""

    def __init__(self, lines: Any) -> None:
        self._lines = lines

    def __aiter__(self) -> _ClippedLines:
        return self

    async def __anext__(self) -> str:
        async for line in self._lines:
            return clip_text(line)
        raise StopAsyncIteration


class _Unanswered:
    """Request ids read and not yet answered, for holding a file's EOF until they are.

    The SDK's dispatcher takes the end of stdin for the client leaving and cancels whatever is
    still running. Read from a file (or a terminal's ^D), EOF only means the requests are all
    written: the client is still there to read the replies, so the read side ends only after
    every request it read was answered (or cancelled by the client)."""

    def __init__(self) -> None:
        self._ids: set[object] = set()
        self._empty = anyio.Event()
        self._empty.set()

    def read(self, item: object) -> None:
        msg = item.message if isinstance(item, SessionMessage) else None
        if isinstance(msg, JSONRPCRequest):
            self._ids.add(msg.id)
            self._empty = anyio.Event() if self._empty.is_set() else self._empty
        elif isinstance(msg, JSONRPCNotification) and msg.method == "notifications/cancelled":
            self._settle((msg.params or {}).get("requestId"))

    def wrote(self, item: object) -> None:
        msg = item.message if isinstance(item, SessionMessage) else None
        if isinstance(msg, JSONRPCResponse | JSONRPCError):
            self._settle(msg.id)

    def _settle(self, request_id: object) -> None:
        self._ids.discard(request_id)
        if not self._ids:
            self._empty.set()

    async def drained(self) -> None:
        await self._empty.wait()


class _Tracked:
    """One of the SDK's message streams, seen by _Unanswered; closing passes through."""

    def __init__(self, inner: Any, pending: _Unanswered) -> None:
        self._inner = inner
        self._pending = pending

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _AnsweredReads(_Tracked):
    """The SDK's read stream, its end held back until every request read was answered."""

    @property
    def last_context(self) -> Any:  # the dispatcher restores each sender's context from it
        return getattr(self._inner, "last_context", None)

    def __aiter__(self) -> _AnsweredReads:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def receive(self) -> Any:
        try:
            item = await self._inner.receive()
        except anyio.EndOfStream:
            await self._pending.drained()
            raise
        self._pending.read(item)
        return item



class _AnsweredWrites(_Tracked):
    """The SDK's write stream, noting each reply for _Unanswered."""

    async def send(self, item: Any) -> None:
        await self._inner.send(item)
        self._pending.wrote(item)



def _answered(streams: tuple[Any, Any]) -> tuple[Any, Any]:
    pending = _Unanswered()
    read, write = streams
    return _AnsweredReads(read, pending), _AnsweredWrites(write, pending)


@contextlib.asynccontextmanager
async def _sdk_transport() -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's transport, reading stdin through the same cut. stdin is read as the SDK reads
    it (UTF-8, undecodable bytes replaced, in a worker thread); passing it in means the SDK does
    not divert fd 0, so this does: a private duplicate serves the wire, fd 0 reads /dev/null."""
    wire = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3) if sys.platform != "win32" else None
    if wire is None:  # Windows: the SDK's transport as it is
        async with stdio_server() as streams:
            yield streams
        return
    saved = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    text = io.TextIOWrapper(os.fdopen(wire, "rb"), encoding="utf-8", errors="replace")
    try:
        async with stdio_server(stdin=_ClippedLines(anyio.wrap_file(text))) as streams:  # type: ignore[arg-type]
            yield _answered(streams)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        with contextlib.suppress(OSError):
            text.close()


@contextlib.asynccontextmanager
async def stdio_streams() -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) message streams for MCPServer's low-level run loop."""
    if not (_pipe_or_socket(0) and _pipe_or_socket(1)):
        async with _sdk_transport() as streams:
            yield streams
        return
    loop = asyncio.get_running_loop()
    # private duplicates serve the wire (owned by the transports once connected); fds 0 and 1
    # are diverted while we serve and put back from the saved copies
    saved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3) for fd in (0, 1)]
    blocking = [os.get_blocking(fd) for fd in saved]
    wire_in = os.fdopen(fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3), "rb", buffering=0)
    wire_out = os.fdopen(fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    transports: list[asyncio.BaseTransport] = []
    try:
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        rtransport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), wire_in)
        transports.append(rtransport)
        wtransport, wprotocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), wire_out)
        transports.append(wtransport)
        writer = asyncio.StreamWriter(wtransport, wprotocol, None, loop)
        # stdio_server annotates anyio.AsyncFile but only iterates stdin and writes/flushes stdout
        async with stdio_server(stdin=_Lines(reader), stdout=_Replies(writer)) as streams:  # type: ignore[arg-type]
            yield streams
    finally:
        # no await in here: a cancelled scope would raise at it and leave the fds diverted
        for transport in transports:
            transport.close()  # closes the duplicate it owns (on the loop's next turn)
        for wire in (wire_in, wire_out)[len(transports):]:
            wire.close()  # never handed to a transport
        # the pipes' open file descriptions outlive us (the client holds the other ends): put
        # back the blocking mode asyncio changed, then the descriptors
        for fd, was_blocking, std in zip(saved, blocking, (0, 1), strict=True):
            with contextlib.suppress(OSError):
                os.set_blocking(fd, was_blocking)
            os.dup2(fd, std)
            os.close(fd)
