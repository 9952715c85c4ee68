"""Every tool's output model lives in labwarden/results (below tools/), and a result read back
from the transcript becomes that model in one place (`results.output_of`): what report/, the
loop's summary and the playbook runner read. Real models, a real transcript store on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from pydantic import BaseModel

from labwarden import results
from labwarden.core.call import ToolCallRecord, ToolFailure
from labwarden.core.errors import ToolError
from labwarden.core.spec import Requirement, ToolInput, ToolSpec
from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.results import UnreadableResult, output_of
from labwarden.results.compare import CompareOutput, PointDelta
from labwarden.results.measure import MeasureOutput
from labwarden.results.sweep import SweepOutput
from labwarden.tools import registry
from labwarden.tools.context import LabContext


def _compare() -> CompareOutput:
    return CompareOutput(baseline="swp-00000000000a", candidate="swp-00000000000b",
                         baseline_build="b1", candidate_build="b2", verdict="improved",
                         deltas=[PointDelta(stations=114, baseline_mean=30.0, candidate_mean=20.0,
                                              delta_pp=-10.0, delta_pct=-33.3, p_value=0.001,
                                              ci95_pp=(-11.0, -9.0), verdict="improved")])


def test_every_tool_output_model_is_the_one_results_names() -> None:
    """The registry's specs and the results mapping name the same tools and the same models (a
    tool added to one and not the other fails here)."""
    assert set(registry._MODULES) == set(results._OUTPUTS)  # the built-in tools, by name
    for name in registry._MODULES:
        model = results.model_of(name)
        assert model is registry.get(name).output, name
        assert model.__module__.startswith("labwarden.results."), (name, model.__module__)
    assert results.model_of("no_such_tool") is None


def test_a_stored_result_reads_back_as_its_model() -> None:
    out = _compare()
    stored = ToolCallRecord(tool="compare", args={}, ok=True, result=out.model_dump(mode="json"))
    got = output_of(stored)
    assert isinstance(got, CompareOutput) and got == out
    assert got.deltas[-1].ci95_pp == (-11.0, -9.0)  # a JSON list is a tuple again
    in_process = ToolCallRecord(tool="compare", args={}, ok=True, result=stored.result, output=out)
    assert output_of(in_process) is out
    failed = ToolCallRecord(tool="compare", args={}, ok=False,
                            error=ToolFailure(kind="tool", message="no"))
    assert output_of(failed) is None
    assert output_of(ToolCallRecord(tool="no_such_tool", args={}, ok=True, result={})) is None


def test_a_result_of_the_tool_under_its_old_name_reads_as_the_renamed_tools_model() -> None:
    """`measure` was called `profile`: a transcript written then names the old tool, and its
    results read as MeasureOutput (the JSON did not change); the old name is no tool now."""
    body = {"profile_id": "prof-0123456789ab", "stations": 18,
            "cpu_pct": {"mean": 12.5, "stdev": 0.4, "samples": 30, "per_rep": [12.5]},
            "counters": {"hal_calls": 40.0}, "rss_kb": 2048, "pinned": True,
            "fingerprint_verified": True, "warnings": []}
    got = output_of(ToolCallRecord(tool="profile", args={}, ok=True, result=body))
    assert isinstance(got, MeasureOutput) and got.profile_id == "prof-0123456789ab"
    assert got.cpu_pct.mean == 12.5
    assert "profile" not in registry._MODULES and registry.get("measure").output is MeasureOutput


def test_a_result_of_another_shape_is_unreadable_naming_the_call_and_field() -> None:
    """A transcript written by another labwarden version: the call, the field and the remedy."""
    body = _compare().model_dump(mode="json")
    del body["verdict"]
    stored = ToolCallRecord(id="abc123", tool="compare", args={}, ok=True, result=body)
    with pytest.raises(UnreadableResult) as exc:
        output_of(stored)
    assert "compare call abc123" in exc.value.problem and "CompareOutput (verdict:" in exc.value.problem
    assert "labwarden transcripts replay" in exc.value.remedy


def test_a_tool_registered_at_run_time_reads_as_its_model() -> None:
    class EchoIn(ToolInput):
        pass

    class EchoOut(BaseModel):
        said: str

    async def run(ctx: object, inp: EchoIn) -> EchoOut:
        return EchoOut(said="hi")

    registry.register(ToolSpec(name="echo_for_results", description="echo", input=EchoIn,
                               output=EchoOut, run=run, effect="host_only"))
    try:
        got = output_of(ToolCallRecord(tool="echo_for_results", args={}, ok=True,
                                       result={"said": "hi"}))
        assert got == EchoOut(said="hi")
    finally:
        registry.unregister("echo_for_results")
    assert results.model_of("echo_for_results") is None


@pytest.mark.anyio
async def test_a_nested_call_returns_the_output_model_asked_for(tmp_path: Path) -> None:
    """`ctx.call(name, args, Model)`: the nested call's output, typed as that model; any other
    model is an internal error naming both. The door is a stand-in for the session's runner
    (what the runner returns is tested through real sessions in test_tool_by_spec)."""
    out = _compare()

    class Door:
        async def call(self, ctx: LabContext, name: str, args: dict[str, Any]) -> ToolCallRecord:
            return ToolCallRecord(tool=name, args=args, ok=True,
                                  result=out.model_dump(mode="json"), output=out)

        async def heal(self, ctx: LabContext, requires: frozenset[Requirement] | None) -> list[str]:
            return []

    ctx = LabContext(profile=cast(LabProfile, None), device=cast(Device, None), data_dir=tmp_path,
                     door=Door())
    got = await ctx.call("compare", {"baseline": "a", "candidate": "b"}, CompareOutput)
    assert got is out and got.deltas[-1].verdict == "improved"
    with pytest.raises(ToolError) as exc:
        await ctx.call("compare", {"baseline": "a", "candidate": "b"}, SweepOutput)
    assert exc.value.kind == "internal"
    assert "returned CompareOutput, not SweepOutput" in exc.value.problem
