"""The conditions a number was measured under (pyperf's habit: a number is worthless without
them), in two sizes that say when they were read:

- WindowConditions: everything one measurement window ran under (build, cpufreq, CLK_TCK, radio
  topology, clients, host, process, perf options), stored in the record with the window's numbers.
  compare and gates refuse to mix numbers whose checked conditions differ; lab/conditions.py
  snapshots them on the DUT at every window.
- CallConditions: what the guard reads before a measuring call runs (fingerprint, governors,
  boost: the knobs it pins), stored on the call's transcript event; audit requires them pinned.
  Only those knobs: the guard reads them before every measuring call, the window snapshot's
  other reads (CLK_TCK, topology, the datamodel count) belong to the windows."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

CHECKED = ("governors", "boost", "clk_tck", "vaps_enabled", "channels", "host", "target",
           "not_applicable")
"""Keys that must be equal for two measurements to be comparable (the build may differ)."""


class WindowConditions(BaseModel):
    """What one measurement window ran under (stored in its record)."""

    build_id: str | None = Field(description="build flashed and verified (None: unverified)")
    fingerprint_verified: bool
    governors: list[str]
    boost: str
    clk_tck: int = Field(description="the DUT's CLK_TCK (ticks per second of /proc times; from "
                         "its auxv, as getconf would say)")
    vaps_enabled: list[str]
    channels: dict[str, str]
    stations: int = Field(description="datamodel count when the window started")
    host: str = Field(description="DUT hostname")
    target: str = Field(description="process measured")
    perf: str | None = Field(None, description="perf record options, if perf ran")
    labwarden: str = Field(description="labwarden version (+git commit of its checkout)")
    not_applicable: dict[str, str] = Field(
        default_factory=dict, description="knobs this DUT does not have, with the reason (e.g. "
        "governor: no cpufreq on this DUT): recorded as such, never faked")

    def governor_ok(self) -> bool:
        """Every CPU at performance; or, recorded as such, a DUT with no governor at all."""
        if "governor" in self.not_applicable:
            return not self.governors  # n/a with governors read would contradict itself
        return bool(self.governors) and all(g == "performance" for g in self.governors)

    def boost_ok(self) -> bool:
        if "boost" in self.not_applicable:
            return self.boost.startswith("n/a")
        return self.boost == "0"

    def pinned(self) -> bool:
        """Governor and boost as measurement needs them, or explicitly not applicable."""
        return self.governor_ok() and self.boost_ok()

    def describe_cpufreq(self) -> str:
        """`governor performance, boost off`, or the n/a reasons, for evidence lines."""
        gov = f"n/a: {self.not_applicable['governor']}" if "governor" in self.not_applicable \
            else f"governor {','.join(sorted(set(self.governors))) or 'none'}"
        boost = f"n/a: {self.not_applicable['boost']}" if "boost" in self.not_applicable \
            else f"boost {self.boost}"
        return f"{gov}; {boost}"

    def differences(self, other: WindowConditions) -> list[str]:
        return [f"{k}: {getattr(self, k)!r} != {getattr(other, k)!r}"
                for k in CHECKED if getattr(self, k) != getattr(other, k)]


def verified_evidence(conds: list[tuple[str, WindowConditions]]) -> tuple[bool, str]:
    """(every window pinned, with CLK_TCK and a verified fingerprint; the evidence)."""
    unpinned = [f"{label}: {c.describe_cpufreq()}, CLK_TCK {c.clk_tck}, verified "
                f"{c.fingerprint_verified}" for label, c in conds
                if not (c.pinned() and c.clk_tck > 0 and c.fingerprint_verified)]
    if not conds:  # nothing measured: nothing to call verified
        return False, "no windows were measured"
    first = conds[0][1]
    return (not unpinned,
            "; ".join(unpinned[:3]) or f"{len(conds)} windows: "
            f"{first.describe_cpufreq()}, CLK_TCK {first.clk_tck}, "
            "fingerprint verified")


class CallConditions(BaseModel):
    """What the guard read before a measuring call ran (a transcript event's `conditions`; events
    written before this model may hold more keys: stations, clk_tck, perf options)."""

    model_config = ConfigDict(extra="allow")

    fingerprint_verified: bool | None = None
    """The running image matched its recorded fingerprint."""
    governors: list[str] | None = None
    """cpufreq governor of each CPU."""
    boost: str | bool | None = None
    """Turbo/boost state ("0"/False = off)."""
    not_applicable: dict[str, str] | None = None
    """Knobs the DUT does not have (e.g. governor: no cpufreq on this DUT), with the reason."""
