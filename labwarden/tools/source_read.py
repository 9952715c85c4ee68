"""source_read: read lines of one firmware source file at a ref, numbered.

Read-only, host only. The path is relative to the repository root and contained in it (no
absolute path, no '..', no symlink out); 100 lines by default, at most 200 per call --
`next_start` continues.
"""

from __future__ import annotations

import asyncio

from pydantic import Field, model_validator

from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.host import patchstore, sourcetree
from labwarden.results.source_read import SourceReadOutput
from labwarden.tools.context import LabContext

MAX_LINES = 200
DEFAULT_LINES = 100
"""~50 characters a C line: 100 lines stay under ~2,000 tokens of result."""


class SourceReadInput(ToolInput):
    path: str = Field(min_length=1, max_length=200, description="file path relative to the "
                      "repository root", examples=["hal.c"])
    start: int = Field(1, ge=1, le=10_000_000, description="first line, 1-based")
    end: int | None = Field(None, ge=1, le=10_000_000, description=f"last line, inclusive (default: start + "
                            f"{DEFAULT_LINES - 1}; at most {MAX_LINES} lines a call)")
    ref: str = Field("HEAD", max_length=100, description="git ref of the firmware repo")

    @model_validator(mode="after")
    def _range(self) -> SourceReadInput:
        if self.end is not None and self.end < self.start:
            raise ValueError(f"end ({self.end}) must be >= start ({self.start})")
        return self


async def run(ctx: LabContext, inp: SourceReadInput) -> SourceReadOutput:
    # a build's commit of another principal's patch does not exist for this caller
    commit, root = await asyncio.to_thread(patchstore.lab_tree, ctx.profile, ctx.data_dir,
                                           inp.ref, ctx.principal)
    end = min(inp.end or inp.start + DEFAULT_LINES - 1, inp.start + MAX_LINES - 1)
    lines, total = await asyncio.to_thread(sourcetree.read_lines, root, inp.path, inp.start, end)
    last = inp.start + len(lines) - 1
    return SourceReadOutput(commit=commit, path=inp.path, start=inp.start, end=max(last, inp.start - 1),
                            total_lines=total,
                            lines=[f"{inp.start + i:4d}| {x}" for i, x in enumerate(lines)],
                            next_start=last + 1 if last < total else None)


SPEC = ToolSpec(name="source_read", description=describe(__doc__), input=SourceReadInput,
                output=SourceReadOutput, run=run, effect="host_only", idempotent=True,
                free_text=frozenset({"path"}))
