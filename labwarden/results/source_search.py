"""What `source_search` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from labwarden.lab.host.sourcetree import Hit


class SourceSearchOutput(BaseModel):
    commit: str
    engine: str = Field(description="ripgrep or python")
    total: int = Field(description="hits over the whole tree")
    files: int = Field(description="files with a hit")
    hits: list[Hit]
    next_offset: int | None = Field(description="pass as offset for the next page; None: no more")
