"""What `measure` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from labwarden.core.kernelsplit import KernelSummary


class CpuSummary(BaseModel):
    mean: float = Field(description="mean of the reps' window CPU%, % of one core")
    stdev: float
    samples: int = Field(description="1 Hz samples behind it")
    per_rep: list[float]


class MeasureOutput(BaseModel):
    profile_id: str
    stations: int
    cpu_pct: CpuSummary
    counters: dict[str, float] = Field(description="uprobe hits per second, mean over reps")
    rss_kb: int
    pinned: bool = Field(description="governor performance and boost off in every window")
    fingerprint_verified: bool = Field(description="in every window")
    perf_bytes_per_s: float | None = Field(None, description="perf.data size per window second")
    system_wide: bool = Field(False, description="perf recorded every CPU (kernel stacks)")
    kernel: KernelSummary | None = Field(None, description="the DUT's kernel CPU split (None: "
                                         "not measured)")
    warnings: list[str]
