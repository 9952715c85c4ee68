"""What a lab has that some tools need at all (core/spec.LabFeature), read from its profile.

A tool whose `needs` the lab lacks is not listed to a model (server/labserver.py, the agent) and
a call to it is refused `not_applicable` with the reason (runtime/runner.py): a daemon without
clients has no `associate`, a lab without a traffic load no `traffic_sweep`. Tools a lab lacks
cost a model every turn (their schemas) and choose worse among many.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

from labwarden.core.spec import LabFeature, ToolSpec
from labwarden.lab.config import Iperf3LoadSection, LabProfile


def _repo_history(repo: Path) -> str | None:
    try:
        # any ref: a checkout at a release may have the history to bisect on a branch
        done = subprocess.run(["git", "-C", str(repo), "rev-list", "--count", "--max-count=2",
                               "--all"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"[build] repo {repo} could not be read ({exc.__class__.__name__})"
    if done.returncode != 0:
        return f"[build] repo {repo} is not a git repository with commits"
    if int(done.stdout.strip() or 0) < 2:
        return f"[build] repo {repo} has one commit (on any ref): there is no range to bisect"
    return None


def missing(profile: LabProfile, feature: LabFeature) -> str | None:
    """Why the lab lacks `feature` (naming the profile key to change), or None if it has it."""
    load = profile.load
    if feature == "clients":
        return None if load.kind != "none" else \
            '[load] kind = "none": this lab has no clients to hold (it is measured at its own workload)'
    if feature == "traffic":
        return None if isinstance(load, Iperf3LoadSection) else \
            f'[load] kind = "{load.kind}": traffic tools need a traffic load ([load] kind = "iperf3")'
    if feature == "router_config":
        if isinstance(load, Iperf3LoadSection) and load.router_config:
            return None
        return "[load] router_config is not set: the DUT has no rule set labwarden may change"
    if feature == "suspects":
        return None if profile.target.suspects else \
            "[target] suspects is empty: no process may be paused"
    if feature == "repo_history":
        return _repo_history(Path(profile.build.repo).expanduser())
    raise ValueError(f"unknown lab feature {feature!r}")


def not_applicable(spec: ToolSpec, profile: LabProfile) -> str | None:
    """Why `spec` does not apply to this lab (its first missing need), or None if it does."""
    for feature in sorted(spec.needs):
        why = missing(profile, feature)
        if why is not None:
            return why
    return None


def applicable(specs: Iterable[ToolSpec], profile: LabProfile) -> list[ToolSpec]:
    """The specs that apply to this lab, in their order; each feature is read once."""
    lacks: dict[LabFeature, bool] = {}
    out = []
    for spec in specs:
        for feature in spec.needs:
            if feature not in lacks:
                lacks[feature] = missing(profile, feature) is not None
        if not any(lacks[f] for f in spec.needs):
            out.append(spec)
    return out
