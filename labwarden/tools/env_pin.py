"""env_pin: pin the measurement conditions and set the profile's config levers -- governor
performance, boost off, topology as the profile names it, process manager on; optionally lower
the trace zones (the config half of a trace short-circuit) and choose the monitor's RPC, where
the profile declares those levers ([levers]).

Mutates DUT configuration (every change is listed in the result and the transcript). A reboot
undoes the runtime part (drift): the guard heals that before measuring, if its policy allows.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab import knobs
from labwarden.results.env_pin import EnvPinOutput
from labwarden.tools.context import LabContext


class EnvPinInput(ToolInput):
    trace_zone_max: int | None = Field(None, ge=0, le=1000, description="lower every trace zone "
                                       "above this level to it (e.g. 200: INFO traces then "
                                       "short-circuit with patch 0100)", examples=[200])
    monitor_rpc: Literal["full", "brief"] | None = Field(None, description="which stats RPC the "
                                                         "monitor polls (brief needs patch 0902)")


async def run(ctx: LabContext, inp: EnvPinInput) -> EnvPinOutput:
    prof, dev = ctx.profile, ctx.device
    changes: list[str] = []
    pinned = knobs.pinned(dev, prof)
    for knob in pinned:
        await ctx.report(len(changes), None, f"pinning {knob.name}")
        if await knob.available() is None:  # a knob the DUT lacks is not applicable: left alone
            changes += await knob.pin()
    if inp.trace_zone_max is not None:
        changes += await knobs.TraceLevel(dev, prof, inp.trace_zone_max).pin()
    if inp.monitor_rpc is not None:
        changes += await knobs.MonitorRpc(dev, prof, inp.monitor_rpc).pin()
    return EnvPinOutput(changes=changes, knobs=[await k.state() for k in pinned])


SPEC = ToolSpec(name="env_pin", description=describe(__doc__), input=EnvPinInput,
                output=EnvPinOutput, run=run, effect="mutates_dut", requires=frozenset({"lease"}),
                idempotent=True)
