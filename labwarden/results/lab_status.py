"""What `lab_status` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from labwarden.core.devtext import DeviceProse, DeviceText
from labwarden.lab.boardstate import BoardHealth
from labwarden.lab.knobs import KnobState, Topology


class SweepArgs(BaseModel):
    """An experiment's full-sweep settings ([decision]), as `sweep` takes them."""

    densities: list[int]
    reps: int
    window_s: float
    settle_s: float


class Workload(BaseModel):
    """What this lab measures under, from its profile: where to start a hunt or a loop."""

    load_kind: str = Field(description="[load] kind: stasim, none, command, wpa_supplicant, iperf3")
    axis: str | None = Field(description="what a workload point counts (clients, streams); None: "
                             "no load axis -- the target works on its own input, one point, 0")
    points: list[int] = Field(description="the workload points experiments screen (the last) and "
                              "sweep at; give them to `sweep` as its densities")
    load_drives_cpu: bool = Field(description="the profile declares that the target's CPU rises "
                                  "along the points (only then must a sweep's CPU rise)")
    suspects: list[str] = Field(description="processes `attribute` may pause")
    counters: dict[str, str] = Field(description="the profile's counters (uprobes): name -> "
                                     "function; a sweep reports them per second")
    offered_load_counter: str | None = Field(description="the counter that must stay equal "
                                             "between A and B (None: not measured here)")
    sweep: SweepArgs = Field(description="how an experiment sweeps a survivor: a `sweep` of the "
                             "running base with exactly these arguments (perf and idle_baseline "
                             "left on) stands in for A's full sweep, a flash saved")


class LabStatusOutput(BaseModel):
    workload: Workload
    reachable: bool
    rtt_ms: float | None = Field(None, description="one round trip on the command channel")
    target_process: str
    target_pid: int | None
    running_version: DeviceText | None = Field(
        None, description="`--version` of the running image (None unless [target] prints_git_hash: "
        "it is run only then)")
    board_health: BoardHealth
    health_reason: DeviceProse | None = Field(description="why the board is not good (DUT "
                                              "output quoted)")
    flashed_build: str | None
    fingerprint_verified: bool = Field(description="verified since the last flash")
    knobs: list[KnobState]
    topology: Topology | None
    associated: dict[str, int] | None = Field(None, description="datamodel count per VAP")
    problems: list[DeviceText] = Field(description="everything not ready for measurement")
    stray_output: list[DeviceText] = Field(
        default_factory=list, description="what the DUT printed outside any reply on the command "
        "channel this session (a login banner, an rc file): discarded from every result")
    remedy: str | None = Field(None, description="when unreachable: what to do (for this kind "
                               "of lab)")
