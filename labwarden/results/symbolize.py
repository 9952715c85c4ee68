"""What `symbolize` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from labwarden.lab.host import folded as fl
from labwarden.lab.host import symfs as sf


class FunctionShare(BaseModel):
    name: str
    total_pct: float = Field(description="% of samples with it anywhere in the stack")
    self_pct: float = Field(description="% of samples with it as the leaf")
    defined_in: str | None = Field(description="DSO of the build that defines it (None: no such "
                                   "symbol in the build -- check the spelling before reading 0%)")


class SymbolizeOutput(BaseModel):
    profile_id: str
    rep: int
    stations: int
    key: str = Field(description="sha256 prefix of perf.data (the cache key)")
    samples: int
    unknown_pct: float = Field(description="% of samples whose leaf frame is unresolved")
    unknown_frames_pct: float
    stacks_with_unknown_pct: float
    unresolved_top: list[str]
    depth: fl.Depth
    system_wide: bool = Field(False, description="the measurement recorded every CPU (kernel stacks)")
    threads: list[fl.ThreadShare] = Field(default_factory=list, description="samples per thread, "
                                          "heaviest first (at most 15)")
    thread_groups: list[fl.ThreadGroup] = Field(default_factory=list, description="samples per "
                                                "thread family (ksoftirqd/*, kworker/*, ...)")
    dominant_path: list[fl.PathStep] = Field(description="heaviest path from the root")
    tree: list[str] = Field(description="'TOTAL%  SELF%  name', indented by call depth")
    functions: list[FunctionShare]
    baseline_profile_id: str | None = None
    top_deltas: list[fl.Delta] = Field(default_factory=list, description="with a baseline: the "
                                       "functions that moved most, by absolute CPU (pp of one "
                                       "core) beside their share of the samples")
    folded: str = Field(description="artifact: folded stacks")
    svg: str = Field(description="artifact: flame graph")
    diff_svg: str | None = Field(None, description="artifact: differential flame graph")
    baseline_svg: str | None = Field(None, description="artifact: the baseline's flame graph")
    symfs: str
    buildids_recorded: bool
    symfs_missing: list[sf.MissingDso] = Field(description="DSOs without symbols (at most 10)")
    warnings: list[str]
    cached: bool = Field(description="perf did not run: every input came from the cache")
