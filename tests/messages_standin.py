"""A local stand-in for the Anthropic Messages API, for agent tests.

A stdlib `http.server` on 127.0.0.1 (a free port, served from a thread) answers
`POST /v1/messages` with scripted turns, as JSON or -- when the request asks `"stream": true`
-- as the SSE events the anthropic SDK reads (message_start, content_block_start/delta/stop,
message_delta with the usage and stop_reason, message_stop). It records every request body, so a
test can assert what the agent sent (system prompt with cache_control, tools, tool_results).

It is the only fake in the agent tests: tools, guard, transcript and lab are real.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Body = dict[str, Any]


@dataclass
class ToolUse:
    name: str
    input: dict[str, Any] | Callable[[Body], dict[str, Any]] = field(default_factory=dict)
    """The tool's arguments, or a function of the request body (to use an earlier result)."""


@dataclass
class Turn:
    """One scripted assistant reply."""

    text: str = ""
    tools: list[ToolUse] = field(default_factory=list)
    input_tokens: int = 1000
    output_tokens: int = 200
    cache_5m: int = 0
    """Tokens written to the 5-minute cache (cache_creation.ephemeral_5m_input_tokens)."""
    cache_1h: int = 0
    cache_read: int = 0
    stop_reason: str | None = None
    """Default: tool_use when tools are given, else end_turn."""
    drop: Literal["before", "midstream"] | None = None
    """Drop the connection (before any byte, or after message_start); the retry gets the turn."""
    drops: int = 1
    """How many requests in a row `drop` drops before the turn is served (an outage)."""
    hold: bool = False
    """Stream message_start, then wait until the stand-in is closed (a call that never ends)."""

    def usage(self) -> dict[str, Any]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_creation_input_tokens": self.cache_5m + self.cache_1h,
                "cache_read_input_tokens": self.cache_read,
                "cache_creation": {"ephemeral_5m_input_tokens": self.cache_5m,
                                   "ephemeral_1h_input_tokens": self.cache_1h}}


def last_result(body: Body) -> dict[str, Any]:
    """The JSON of the last tool_result in a request (what the agent just sent back)."""
    for msg in reversed(body["messages"]):
        if msg["role"] != "user" or isinstance(msg["content"], str):
            continue
        for block in reversed(msg["content"]):
            if block.get("type") == "tool_result":
                content = block["content"]
                text = content if isinstance(content, str) else content[0]["text"]
                return json.loads(text)
    raise AssertionError("no tool_result in the request")


def from_result(key: str, arg: str | None = None) -> Callable[[Body], dict[str, Any]]:
    """Tool input {arg: <last result's key>}."""
    return lambda body: {arg or key: last_result(body)[key]}


def nth_result(i: int, key: str, arg: str) -> Callable[[Body], dict[str, Any]]:
    """Tool input {arg: the i-th tool_result's key} of the last turn's results (parallel calls)."""
    def pick(body: Body) -> dict[str, Any]:
        last = next(m for m in reversed(body["messages"]) if m["role"] == "user"
                    and not isinstance(m["content"], str))
        results = [b for b in last["content"] if b.get("type") == "tool_result"]
        return {arg: json.loads(results[i]["content"][0]["text"])[key]}
    return pick


class MessagesStandIn:
    """`with MessagesStandIn(turns) as api:` -> api.url for ANTHROPIC_BASE_URL / base_url."""

    def __init__(self, turns: list[Turn], model: str = "claude-sonnet-4-5") -> None:
        self.turns = list(turns)
        self.model = model
        self.requests: list[Body] = []
        self.arrived: list[float] = []
        """When each request arrived (time.time()), in order."""
        self.served = 0
        self.dropped = 0
        self._dropped_turns: dict[int, int] = {}
        self._lock = threading.Lock()
        self._release = threading.Event()
        self.request_seen = threading.Condition()
        self._ids = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> MessagesStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def wait_requests(self, n: int, timeout: float = 60.0) -> None:
        """Block until at least n requests arrived."""
        with self.request_seen:
            if not self.request_seen.wait_for(lambda: len(self.requests) >= n, timeout):
                raise TimeoutError(f"stand-in saw {len(self.requests)} request(s), expected {n}")

    # -- serving ---------------------------------------------------------------------------

    def _next(self, body: Body) -> tuple[int, Turn, bool]:
        """(turn index, turn, drop now?) for a request; a dropped turn is served on the retry."""
        with self._lock:
            with self.request_seen:
                self.requests.append(body)
                self.arrived.append(time.time())
                self.request_seen.notify_all()
            if self.served >= len(self.turns):
                raise AssertionError(f"script exhausted after {self.served} turns")
            i, turn = self.served, self.turns[self.served]
            drop = turn.drop is not None and self._dropped_turns.get(i, 0) < turn.drops
            if drop:
                self._dropped_turns[i] = self._dropped_turns.get(i, 0) + 1
                self.dropped += 1
            if not drop:
                self.served += 1
            return i, turn, drop

    def _content(self, turn: Turn, body: Body) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if turn.text:
            blocks.append({"type": "text", "text": turn.text})
        for use in turn.tools:
            args = use.input(body) if callable(use.input) else use.input
            blocks.append({"type": "tool_use", "id": f"toolu_{next(self._ids):06d}", "name": use.name,
                           "input": args})
        return blocks

    def _message(self, turn: Turn, content: list[dict[str, Any]], stop: str | None) -> dict[str, Any]:
        return {"id": f"msg_{next(self._ids):06d}", "type": "message", "role": "assistant",
                "model": self.model, "content": content, "stop_reason": stop, "stop_sequence": None,
                "usage": turn.usage()}

    def _sse(self, turn: Turn, content: list[dict[str, Any]], stop: str) -> Iterator[tuple[str, Any]]:
        start = self._message(turn, [], None)
        start["usage"] = {**turn.usage(), "output_tokens": 1}
        yield "message_start", {"type": "message_start", "message": start}
        yield "ping", {"type": "ping"}
        for i, block in enumerate(content):
            if block["type"] == "text":
                yield "content_block_start", {"type": "content_block_start", "index": i,
                                              "content_block": {"type": "text", "text": ""}}
                words = block["text"].split(" ")
                for j, w in enumerate(words):
                    piece = w if j == len(words) - 1 else w + " "
                    yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                                  "delta": {"type": "text_delta", "text": piece}}
            else:
                yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                    "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}
                raw = json.dumps(block["input"])
                for k in range(0, len(raw), 7):
                    yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                        "type": "input_json_delta", "partial_json": raw[k:k + 7]}}
            yield "content_block_stop", {"type": "content_block_stop", "index": i}
        u = turn.usage()
        delta = {"stop_reason": stop, "stop_sequence": None}
        yield "message_delta", {"type": "message_delta", "delta": delta,
                                "usage": {k: u[k] for k in ("input_tokens", "output_tokens",
                                                            "cache_creation_input_tokens",
                                                            "cache_read_input_tokens")}}
        yield "message_stop", {"type": "message_stop"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def _reply_json(self, status: int, payload: dict[str, Any], request_id: str) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", request_id)
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.split("?")[0] != "/v1/messages":
                    self._reply_json(404, {"type": "error", "error": {"type": "not_found_error",
                                                                      "message": self.path}}, "req_404")
                    return
                _, turn, drop = standin._next(body)
                request_id = f"req_standin_{len(standin.requests):03d}"
                if drop and turn.drop == "before":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                content = standin._content(turn, body)
                stop = turn.stop_reason or ("tool_use" if turn.tools else "end_turn")
                if not body.get("stream"):
                    self._reply_json(200, standin._message(turn, content, stop), request_id)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("request-id", request_id)
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    for n, (name, data) in enumerate(standin._sse(turn, content, stop)):
                        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                        self.wfile.flush()
                        if n == 0 and drop:  # after message_start: the connection is lost mid-stream
                            self.connection.shutdown(2)
                            return
                        if n == 0 and turn.hold:
                            standin._release.wait()
                            return
                except (BrokenPipeError, ConnectionResetError):
                    return

        return Handler
