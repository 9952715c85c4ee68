"""associate: hold N clients on the DUT, split round-robin over its radios, verified against
the DUT's datamodel. `stations: 0` disassociates everyone and verifies the cleanup.

The load is the profile's `[load] kind` (stasim, a command, or none: then only 0 clients); the
count is the DUT's own (`[readers] clients`; without one, the result says it was not verified).

Mutates DUT state (its client table), reversibly. Topology stays constant: before holding any
client the topology is asserted -- healed as `[policy] heal` allows (the changes are in
`healed`), refused otherwise -- and with a `[topology]` in the profile an uneven split over the
radios fails the call; without one it is reported, never hidden.
"""

from __future__ import annotations

import asyncio
import time

from pydantic import Field, model_validator

from labwarden.core.errors import ToolError
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.drivers import load as load_drivers
from labwarden.lab.drivers.load import LoadError
from labwarden.lab.dut import datamodel
from labwarden.results.associate import AssociateOutput
from labwarden.tools.context import LabContext


class AssociateInput(ToolInput):
    stations: int | None = Field(None, ge=0, le=4096, description="total clients; 0 = none",
                                 examples=[114])
    per_radio: int | None = Field(None, ge=0, le=512, description="clients per radio instead "
                                  "of a total (x the profile's radio count)", examples=[19])
    timeout_s: float = Field(30, gt=0, le=600)

    @model_validator(mode="after")
    def _one_of(self) -> AssociateInput:
        if (self.stations is None) == (self.per_radio is None):
            raise ValueError("give exactly one of stations or per_radio")
        return self


async def run(ctx: LabContext, inp: AssociateInput) -> AssociateOutput:
    prof = ctx.profile
    load = load_drivers.for_profile(prof, ctx.device)
    n = inp.stations if inp.stations is not None else (inp.per_radio or 0) * load.radios
    t0 = time.monotonic()
    # the topology the clients are split over, healed by the guard as `[policy] heal` allows
    # (a guard decision under this call), else refused -- never held over drifted radios
    healed = await ctx.heal(frozenset({"topology_asserted"})) if n else []
    if healed:
        await ctx.report(0, 2, "healed the topology: " + ", ".join(healed))
    where = load_drivers.label(load, n)
    await ctx.report(0, 2, f"holding {where}")
    try:
        await load.hold(n)
    except LoadError as exc:
        raise ToolError("device", exc.problem, exc.remedy) from exc
    deadline = time.monotonic() + inp.timeout_s
    counts: dict[str, int] | None = {}
    while True:
        counts = await datamodel.count(ctx.device, prof)
        if counts is None or counts.get("total") == n:
            break
        if time.monotonic() > deadline:
            raise ToolError("device", f"the DUT's datamodel holds {counts.get('total')} clients, "
                            f"expected {n} after {inp.timeout_s:g} s",
                            f"see {load.where()}; lab_status")
        await asyncio.sleep(0.1)
    if counts is None:  # nothing on the DUT to check against: say so, never claim a count
        await ctx.report(2, 2, f"{where} held; {datamodel.NOT_APPLICABLE}")
        return AssociateOutput(associated=n, datamodel_count=None, per_radio=[],
                               even_split=True, duration_s=round(time.monotonic() - t0, 2),
                               note=datamodel.NOT_APPLICABLE, healed=healed)
    per_radio = [v for k, v in sorted(counts.items(), key=lambda kv: kv[0]) if k != "total"]
    await ctx.report(2, 2, f"{where} verified in the datamodel")
    if not per_radio:  # a reader that prints only the total (`N`, documented): no split to check
        return AssociateOutput(associated=n, datamodel_count=counts["total"], per_radio=[],
                               even_split=True, duration_s=round(time.monotonic() - t0, 2),
                               note="the clients reader gives a total only: the split over "
                               "radios was not checked", healed=healed)
    per_radio = per_radio[: load.radios] + [0] * (load.radios - len(per_radio))
    even = max(per_radio) - min(per_radio) <= 1
    if n and not even and prof.topology is not None:  # asserted above: the split must follow it
        raise ToolError("device", f"{where} held but split {per_radio} over the radios, with "
                        f"the topology asserted ({len(prof.topology.vaps)} VAPs)",
                        f"[load] radios ({load.radios}) must match [topology] vaps; see "
                        f"{load.where()}; lab_status")
    return AssociateOutput(associated=n, datamodel_count=counts["total"], per_radio=per_radio,
                           even_split=even, duration_s=round(time.monotonic() - t0, 2),
                           healed=healed)


SPEC = ToolSpec(name="associate", description=describe(__doc__),
                input=AssociateInput, output=AssociateOutput, run=run, effect="mutates_dut",
                requires=frozenset({"lease"}), idempotent=True,
                needs=frozenset({"clients"}))
