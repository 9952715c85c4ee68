"""Token usage of one model call, shaped like the Anthropic API's `usage` object."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class CacheCreation(BaseModel):
    """How the cache-write tokens split between the two cache lifetimes."""

    model_config = ConfigDict(extra="allow")

    ephemeral_5m_input_tokens: int = 0
    """Tokens written to the 5-minute cache."""
    ephemeral_1h_input_tokens: int = 0
    """Tokens written to the 1-hour cache."""


class Usage(BaseModel):
    """Token counts of one model call (the API's `usage`; `None` from the API reads as 0)."""

    model_config = ConfigDict(extra="allow")

    input_tokens: int = 0
    """Uncached input tokens (after the last cache breakpoint)."""
    output_tokens: int = 0
    """Generated tokens."""
    cache_creation_input_tokens: int | None = 0
    """Tokens written to the prompt cache (both lifetimes together)."""
    cache_read_input_tokens: int | None = 0
    """Tokens read from the prompt cache."""
    cache_creation: CacheCreation | None = None
    """The 5m/1h split of the cache writes; absent on older API versions (then all count as 5m)."""

    def cache_writes(self) -> tuple[int, int]:
        """(5-minute, 1-hour) cache-write tokens; without a split everything counts as 5-minute."""
        if self.cache_creation is None:
            return self.cache_creation_input_tokens or 0, 0
        return (self.cache_creation.ephemeral_5m_input_tokens,
                self.cache_creation.ephemeral_1h_input_tokens)

    def cache_reads(self) -> int:
        return self.cache_read_input_tokens or 0
