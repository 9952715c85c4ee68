"""One model turn on the anthropic SDK: streamed, priced, logged, retried.

`Model.turn()` sends the system prompt (one cached text block), the tools of the registry (the
last one cached too) and the conversation (its last block cached, so a long loop re-reads its
history from the cache), streams text deltas to a callback, and returns the final message. Every
call lands in the transcript as a `model_call` with its usage and cost, and its tokens and dollars
are added to the session's budget counters before the turn returns.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anthropic
import httpx2

from labwarden.core.errors import LabError
from labwarden.lab.config import LabProfile
from labwarden.runtime.session import LabSession
from labwarden.tools import registry
from labwarden.transcripts import pricing

DEFAULT_MODEL = "claude-sonnet-4-6"  # sonnet-4-5 reaches end of life on 2026-11-30 (SDK)
CACHED = {"type": "ephemeral"}

TextSink = Callable[[str], Awaitable[None] | None]
RetrySink = Callable[[int, float, str], Awaitable[None] | None]


class StreamCut(Exception):
    """The stream ended before message_stop (the connection closed mid-answer)."""


class ModelUnavailable(LabError):
    """The API could not be reached (or kept failing) after the retries, or has no key."""


@dataclass
class ModelOptions:
    model: str = DEFAULT_MODEL
    base_url: str | None = None
    """None: ANTHROPIC_BASE_URL, else the SDK's default."""
    api_key: str | None = None
    """None: ANTHROPIC_API_KEY."""
    max_tokens: int = 8192
    retries: int = 4
    """Extra attempts after a lost connection, a 5xx or a 529 (overloaded), when no
    `retry_until` is set (chat: a person is waiting)."""
    backoff_s: float = 1.0
    """First wait between attempts; doubles each time, up to `max_backoff_s`."""
    max_backoff_s: float = 60.0
    retry_until: datetime | None = None
    """Keep retrying (with backoff) until this time instead of `retries` times: the unattended
    loop sets its deadline, so an API outage of an hour costs an hour, not the night."""
    timeout_s: float = 600.0


@dataclass
class Totals:
    """What the model calls of this agent run cost (plus what a resumed run had spent before)."""

    calls: int = 0
    input: int = 0
    output: int = 0
    cache_write: int = 0
    cache_read: int = 0
    usd: float = 0.0
    carried_usd: float = 0.0
    """Dollars of the sessions this run resumes."""
    carried_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.input + self.output + self.cache_write + self.cache_read

    @property
    def spent_usd(self) -> float:
        return self.usd + self.carried_usd

    def line(self) -> str:
        return (f"tokens in {self.input:,} / out {self.output:,} / cache write {self.cache_write:,} "
                f"read {self.cache_read:,}, ${self.spent_usd:.4f}")


def check_priced(model: str) -> None:
    """Raise UnknownModel (naming the priced ones) before spending anything on an unpriced model."""
    pricing.table().lookup(model)


def tool_params(profile: LabProfile) -> list[dict[str, Any]]:
    """The tools this lab can run (lab/features.py) as the Messages API `tools` param; the last
    one carries the cache mark."""
    tools: list[dict[str, Any]] = [
        {"name": spec.name, "description": spec.description, "input_schema": spec.input_schema()}
        for spec in registry.listed(profile)]
    if tools:
        tools[-1]["cache_control"] = CACHED
    return tools


def system_param(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "cache_control": CACHED}]


def with_cache_mark(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy whose last content block is a cache breakpoint (the history is re-read from cache)."""
    out = copy.deepcopy(messages)
    if out:
        content = out[-1]["content"]
        if isinstance(content, str):
            content = out[-1]["content"] = [{"type": "text", "text": content}]
        if content:
            content[-1]["cache_control"] = CACHED
    return out


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, StreamCut | anthropic.APIConnectionError | httpx2.TransportError):
        return True  # lost connection, before the response or in the middle of the stream
    if isinstance(exc, anthropic.APIStatusError):
        return exc.status_code >= 500 or exc.status_code in (408, 429)
    return False


async def _maybe_await(value: Awaitable[None] | None) -> None:
    if value is not None:
        await value


@dataclass
class Model:
    options: ModelOptions
    totals: Totals = field(default_factory=Totals)
    client: anthropic.AsyncAnthropic | None = None
    tools: list[dict[str, Any]] | None = None
    """The `tools` param, built at the first turn: the lab's tool list (a git call, every schema)
    does not change while the model runs, and the same bytes keep the prompt cache."""

    def __post_init__(self) -> None:
        if self.client is None:
            try:  # retries are ours (a stream can also break after it started)
                self.client = anthropic.AsyncAnthropic(api_key=self.options.api_key,
                                                       base_url=self.options.base_url, max_retries=0,
                                                       timeout=self.options.timeout_s)
            except anthropic.AnthropicError as exc:
                raise ModelUnavailable(str(exc), "set ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL for "
                                       "a proxy or a stand-in)") from exc
            # the SDK accepts a client without credentials and fails at the first request (a
            # TypeError from deep inside it): say so now, before anything else is opened
            c = self.client
            if c.api_key is None and c.auth_token is None and c.credentials is None:
                raise ModelUnavailable(
                    "no API key: ANTHROPIC_API_KEY is not set (nor ANTHROPIC_AUTH_TOKEN or an "
                    "anthropic credentials profile)",
                    "export ANTHROPIC_API_KEY=sk-ant-... (and ANTHROPIC_BASE_URL or --base-url for "
                    "a proxy or a stand-in); `labwarden loop --planner patches --patches DIR` "
                    "needs no key")

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    async def turn(self, ctx: LabSession, system: str, messages: list[dict[str, Any]],
                   on_text: TextSink | None = None, on_retry: RetrySink | None = None) -> Any:
        """One streamed model call; returns the SDK's final Message."""
        assert self.client is not None
        if self.tools is None:
            self.tools = tool_params(ctx.profile)
        params: dict[str, Any] = {"model": self.options.model, "max_tokens": self.options.max_tokens,
                                  "system": system_param(system), "tools": self.tools,
                                  "messages": with_cache_mark(messages)}
        delay = self.options.backoff_s
        attempt = 0
        while True:
            try:
                async with self.client.messages.stream(**params) as stream:
                    async for event in stream:
                        if event.type == "text" and on_text is not None:
                            await _maybe_await(on_text(event.text))
                    message = await stream.get_final_message()
                    request_id = stream.request_id
                if message.stop_reason is None:
                    # the SDK returns what it had when the body ends early; the API bills the
                    # call anyway, so it is recorded before the retry
                    self._record(ctx, message, request_id, stop_reason="interrupted")
                    raise StreamCut(f"the stream ended after {len(message.content)} content block(s) "
                                    "without message_stop")
                break
            except (StreamCut, anthropic.APIError, httpx2.TransportError) as exc:
                if not _retryable(exc):
                    raise
                if self._give_up(attempt, delay):
                    raise ModelUnavailable(
                        f"the model API failed {attempt + 1} time(s): {type(exc).__name__}: {exc}",
                        "check the network and ANTHROPIC_BASE_URL; run the same `labwarden loop` "
                        "command again: it resumes from the transcript") from exc
                if on_retry is not None:
                    await _maybe_await(on_retry(attempt + 1, delay, f"{type(exc).__name__}: {exc}"))
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.options.max_backoff_s)
                attempt += 1
        self._record(ctx, message, request_id)
        return message

    def _give_up(self, attempt: int, delay: float) -> bool:
        """Out of attempts (no deadline) or out of time (the next try would start after it)."""
        until = self.options.retry_until
        if until is None:
            return attempt >= self.options.retries
        return datetime.now(until.tzinfo).timestamp() + delay >= until.timestamp()

    def _record(self, ctx: LabSession, message: Any, request_id: str | None,
                stop_reason: str | None = None) -> None:
        usage = message.usage.model_dump()
        event = pricing.model_call(self.options.model, usage, request_id=request_id,
                                 stop_reason=stop_reason or message.stop_reason)
        ctx.log(event)
        t = pricing.tokens_by_kind(event.usage)
        tot = self.totals
        tot.calls += 1
        tot.input += t["input"]
        tot.output += t["output"]
        tot.cache_write += t["cache_write_5m"] + t["cache_write_1h"]
        tot.cache_read += t["cache_read"]
        tot.usd += event.cost_usd
        if ctx.guard is not None:
            ctx.guard.budget.add_model_usage(sum(t.values()), event.cost_usd)
