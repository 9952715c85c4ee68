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
non-blocking mode would disturb; Windows) keeps the SDK's transport, its lines cut the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import stat
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp.server.stdio import stdio_server

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
            yield streams
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
