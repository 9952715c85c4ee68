"""source_search: search the firmware sources at a ref -- a regular expression, file:line hits
with context lines, paged (ripgrep when installed, else a Python fallback in a child process
stopped after 10 s; same results).

Read-only, host only: the tree of that commit, extracted once; nothing is checked out or
changed. `path_glob` narrows the files (e.g. '*.c'); results are capped per page and
`next_offset` fetches the next page.
"""

from __future__ import annotations

import asyncio

from pydantic import Field

from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.host import grepworker, patchstore, sourcetree
from labwarden.results.source_search import SourceSearchOutput
from labwarden.tools.context import LabContext


class SourceSearchInput(ToolInput):
    pattern: str = Field(min_length=1, max_length=200, description="regular expression, matched "
                         "per line", examples=["hal_get_all_stations_bulk"])
    ref: str = Field("HEAD", max_length=100, description="git ref of the firmware repo",
                     examples=["HEAD"])
    path_glob: str | None = Field(None, max_length=100, description="only files matching this "
                                  "glob (relative path or file name)", examples=["*.c"])
    context: int = Field(1, ge=0, le=5, description="lines of context above and below each hit")
    offset: int = Field(0, ge=0, le=1_000_000, description="hits to skip (from a previous next_offset)")
    limit: int = Field(10, ge=1, le=50, description="hits per page (a page of 10 with one line of "
                       "context stays under ~2,000 tokens)")


async def run(ctx: LabContext, inp: SourceSearchInput) -> SourceSearchOutput:
    # a build's commit of another principal's patch does not exist for this caller
    commit, root = await asyncio.to_thread(patchstore.lab_tree, ctx.profile, ctx.data_dir,
                                           inp.ref, ctx.principal)
    rg = sourcetree.ripgrep()
    if rg is not None:  # a linear-time engine, in its own process
        hits = await asyncio.to_thread(sourcetree.search_ripgrep, rg, root, inp.pattern,
                                       inp.path_glob, inp.context)
        engine = "ripgrep"
    else:  # Python's re backtracks: in a child process the server kills (grepworker.py)
        hits = await grepworker.search(root, inp.pattern, inp.path_glob, inp.context)
        engine = "python"
    page = hits[inp.offset:inp.offset + inp.limit]
    nxt = inp.offset + inp.limit
    return SourceSearchOutput(commit=commit, engine=engine, total=len(hits),
                              files=len({h.path for h in hits}), hits=page,
                              next_offset=nxt if nxt < len(hits) else None)


SPEC = ToolSpec(name="source_search", description=describe(__doc__), input=SourceSearchInput,
                output=SourceSearchOutput, run=run, effect="host_only", idempotent=True,
                free_text=frozenset({"pattern", "path_glob"}))
