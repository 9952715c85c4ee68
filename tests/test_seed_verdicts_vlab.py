"""Seed 000's verdicts, measured at 114 clients on the vlab: 0901 vs baseline and 0902 vs 0901
improve, 0905 vs its base is not a change (and its function is at 0% of samples); gate_check passes
on each sweep and names the gate that fails when a condition is broken on purpose."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from labwarden.core.measurements import MeasurementRecord, SweepRecord
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.tools.context import LabContext
from labwarden.vlab.layout import VlabLayout

pytestmark = pytest.mark.anyio
SWEEP = {"densities": [60, 114], "reps": 3, "window_s": 5}
AT_114 = {**SWEEP, "densities": [114]}
"""The middle stages' sweeps: their verdicts are at 114; the curve (and cpu_monotonic with it)
is the baseline's and the last stage's, whose gates are broken on purpose below."""
MIN_EFFECT = 10.0
"""The equivalence margin: a smaller change is 'same'. A patched build moves code, and on
this vlab a move alone shifts CPU by about +/-7% (0905, whose function never runs, measured +7.4%
in one run and -7% in another); the fixes are -35%. The refutation of 0905 is its 0% share."""


async def _ok(ctx: LabContext, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    rec = await call_tool(ctx, tool, args)
    assert rec.ok and rec.result is not None, (tool, rec.error)
    return rec.result


async def _stage(ctx: LabContext, patches: list[str], label: str, rpc: str,
                 sweep: dict[str, Any] = AT_114) -> dict[str, Any]:
    built = await _ok(ctx, "build", {"patches": patches})
    await _ok(ctx, "flash", {"build_id": built["build_id"]})
    assert (await _ok(ctx, "fingerprint_verify", {"build_id": built["build_id"]}))["verified"]
    await _ok(ctx, "env_pin", {"monitor_rpc": rpc})
    return await _ok(ctx, "sweep", {**sweep, "label": label})


async def _cmp(ctx: LabContext, a: dict[str, Any], b: dict[str, Any]) -> str:
    res = await _ok(ctx, "compare", {"baseline": a["sweep_id"], "candidate": b["sweep_id"],
                                     "min_effect_pct": MIN_EFFECT})
    return str(res["verdict"])


async def test_story_at_114(lab: VlabLayout) -> None:
    profile = LabProfile.from_file(lab.lab_toml)
    async with open_lab(profile, client="test") as ctx:
        assert (await _ok(ctx, "fingerprint_verify", {"build_id": profile.build.baseline}))["verified"]
        await _ok(ctx, "env_pin", {"monitor_rpc": "full"})
        base = await _ok(ctx, "sweep", {**SWEEP, "label": "baseline"})
        assert len(json.dumps(base)) < 8000, "a sweep result stays small"
        s0901 = await _stage(ctx, ["0901"], "0901", "full")
        s0902 = await _stage(ctx, ["0901", "0902"], "0901+0902", "brief")
        s0905 = await _stage(ctx, ["0901", "0902", "0905"], "0901+0902+0905", "brief", SWEEP)
        verdicts = [await _cmp(ctx, base, s0901), await _cmp(ctx, s0901, s0902),
                    await _cmp(ctx, s0902, s0905)]
        means = [s["points"][-1]["cpu_mean"] for s in (base, s0901, s0902, s0905)]
        # 0905 is never called a change; "same" needs its interval inside +-10%, which 3 + 3
        # windows of a code move's +-7% do not always give (ci8: -5.4%, "unknown") -- the
        # refutation is its 0% share below, as in the seed study
        assert verdicts[:2] == ["improved", "improved"], (verdicts, means)
        assert verdicts[2] in ("same", "unknown"), (verdicts, means)
        sym = await _ok(ctx, "symbolize", {"profile_id": s0905["points"][-1]["profile_id"],
                                           "functions": ["hal_get_all_stations_bulk"]})
        assert len(json.dumps(sym)) < 8000
        share = sym["functions"][0]
        assert share["total_pct"] == 0.0 and share["defined_in"], "refuted: it never runs"
        for s in (base, s0901, s0902, s0905):
            gates = await _ok(ctx, "gate_check", {"sweep_id": s["sweep_id"]})
            assert gates["passed"], gates
            monotonic = next(g for g in gates["gates"] if g["name"] == "cpu_monotonic")
            assert monotonic["status"] == ("passed" if len(s["points"]) > 1 else "not_applicable")
        await _broken_gates(ctx, s0905["sweep_id"])


async def _broken_gates(ctx: LabContext, sweep_id: str) -> None:
    """Break one condition at a time in a copy of the records; the right gate fails."""
    store = RecordStore(ctx.data_dir)
    rec = store.load("swp", sweep_id, SweepRecord)
    top = store.load("prof", rec.points[-1].profile_id, MeasurementRecord)

    async def failed_with(sweep: SweepRecord, prof: MeasurementRecord) -> list[str]:
        pid, sid = store.new_id("prof"), store.new_id("swp")
        # a copy owns copies of its artifacts: symbolize reads perf.data only from the record's own
        old, new = store.artifact(prof.id), store.artifact_dir(pid)
        shutil.copytree(old, new, dirs_exist_ok=True)
        windows = [w.model_copy(update={"perf_data": w.perf_data and str(new / Path(w.perf_data).name)})
                   for w in prof.windows]
        store.save("prof", pid, prof.model_copy(update={"id": pid, "windows": windows}))
        points = [*sweep.points[:-1], sweep.points[-1].model_copy(update={"profile_id": pid})]
        store.save("swp", sid, sweep.model_copy(update={"id": sid, "points": points}))
        return list((await _ok(ctx, "gate_check", {"sweep_id": sid}))["failed"])

    last = rec.points[-1]
    lying = rec.model_copy(update={"points": [*rec.points[:-1],
                                              last.model_copy(update={"per_radio": [19] * 5 + [18]})]})
    assert await failed_with(lying, top) == ["assoc_matches_datamodel"]
    w = top.windows[0]
    unpinned = w.conditions.model_copy(update={"governors": ["schedutil"] * len(w.conditions.governors)})
    drifted = top.model_copy(update={"windows": [w.model_copy(update={"conditions": unpinned}),
                                                 *top.windows[1:]]})
    assert await failed_with(rec, drifted) == ["conditions_verified"]
    assert await failed_with(rec.model_copy(update={"cleanup_count": 3}), top) == ["functional_parity"]
    flat = rec.model_copy(update={"points": [rec.points[0].model_copy(update={"cpu_mean": 99.0}),
                                             *rec.points[1:]]})
    assert await failed_with(flat, top) == ["cpu_monotonic"]
