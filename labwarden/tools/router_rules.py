"""router_rules: set the DUT's forward rule set -- N rules walked one by one (`chain`) or one rule
and an nftables set lookup (`set`), optionally through a WireGuard tunnel -- by writing the
`rules`, `mode` and `wireguard` options of its router config ([load] router_config, UCI) and
running [load] router_reload, which applies it and prints the state; returns the setting before
and the state after. A config change, so an A/B is one call apart.

Mutates the DUT's config (persistent in its overlay), reversibly.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from labwarden.core.devtext import quote
from labwarden.core.errors import ToolError
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab import trafficwin, uci
from labwarden.results.router_rules import RouterRulesOutput
from labwarden.tools.context import LabContext

_STATE = re.compile(r"rules=(\S+) mode=(\S+)")
_WG = re.compile(r"wireguard=(\S+)")


class RouterRulesInput(ToolInput):
    rules: int = Field(ge=0, le=5000, description="forward rules that never match the traffic",
                       examples=[200])
    mode: Literal["chain", "set"] = Field("chain", description="chain: one rule per address (a "
                                          "linear walk); set: one rule, the addresses in a set")
    wireguard: bool = Field(False, description="also route through a WireGuard tunnel (where the "
                            "DUT's router config has one: the qlab's runs both ends on the DUT)")


async def run(ctx: LabContext, inp: RouterRulesInput) -> RouterRulesOutput:
    section = trafficwin.driver(ctx.profile).section
    if section.router_config is None or not section.router_reload:
        raise ToolError("invalid_input", "this lab's [load] names no router config to change",
                        "set [load] router_config and router_reload in the lab profile "
                        "(`labwarden qlab up --traffic` writes them)")
    path = f"{ctx.profile.dut.paths.config.rstrip('/')}/{section.router_config}"
    text = (await ctx.device.read_file(path)).decode(errors="replace")
    sections = uci.parse(text, path)
    if not sections:
        raise ToolError("device", f"{path} on the DUT has no section", "restore the DUT's config")
    old = sections[0].options
    before = (f"rules={old.get('rules', '?')} mode={old.get('mode', '?')} "
              f"wireguard={old.get('wireguard', '0')} (from {path})")
    sections[0].options.update({"rules": str(inp.rules), "mode": inp.mode,
                                "wireguard": "1" if inp.wireguard else "0"})
    await ctx.device.write_file(path, uci.dumps(sections).encode())
    res = await ctx.device.run(section.router_reload, timeout=120)
    m, wg = _STATE.search(res.stdout), _WG.search(res.stdout)
    wg_ok = (wg.group(1) == "1") == inp.wireguard if wg else not inp.wireguard
    if res.exit_status != 0 or m is None or m.groups() != (str(inp.rules), inp.mode) or not wg_ok:
        raise ToolError("device", f"`{' '.join(section.router_reload)}` did not apply {inp.rules} "
                        f"{inp.mode} rules: {quote(res.stdout + res.stderr)}",
                        f"see {path} on the DUT and run the reload by hand")
    return RouterRulesOutput(before=quote(before), after=quote(res.stdout.strip()),
                             rules=inp.rules, mode=inp.mode, wireguard=inp.wireguard)


SPEC = ToolSpec(name="router_rules", description=describe(__doc__), input=RouterRulesInput,
                output=RouterRulesOutput, run=run, effect="mutates_dut",
                requires=frozenset({"lease"}), idempotent=True,
                needs=frozenset({"router_config"}))
