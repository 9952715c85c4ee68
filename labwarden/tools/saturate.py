"""saturate: the highest stable packet rate through the DUT at one frame length -- UDP windows
offered at rising rates (doubling until the loss passes loss_max_pct), then bisected; the answer
is checked by a window at 1.2x (must lose more than the threshold) and at 0.8x (must not), and
the limit is named with the DUT's evidence: cpu (a core's softirq + system share at its ceiling,
ksoftirqd running with softnet squeezes), queue (qdisc drops / tx errors rising while the CPU has
room), ingress (the DUT's NIC took in less than was offered: dropped before its kernel saw them --
on a VM DUT, a vCPU that did not drain the ring), load_host (the sender could not offer the rate),
beyond_dut (the DUT received and forwarded what was offered; the loss is past it). With
`baseline`, says whether the rate improved beyond the baseline's own 1.2x check.

Needs a lab whose [load] kind is "iperf3". Sends traffic through the DUT; leaves no load running.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from labwarden.core.errors import ToolError
from labwarden.core.records import RecordStore
from labwarden.core.spec import ToolSpec, describe
from labwarden.lab import trafficwin
from labwarden.lab.drivers.load.iperf3 import TrafficSpec
from labwarden.results.saturate import (
    Limit,
    SatStep,
    SaturateInput,
    SaturateOutput,
    SaturateRecord,
    VsBaseline,
)
from labwarden.tools.context import LabContext

KSOFTIRQD_BUSY_PCT = 20.0
"""ksoftirqd threads at this share of a core or more: softirq work no longer fits in interrupts."""

def _mbps(pps: int, length: int) -> float:
    return round(pps * length * 8 / 1e6, 3)


def _step(ts: trafficwin.TrafficStep, pps: int, inp: SaturateInput) -> SatStep:
    t, k, q = ts.traffic, ts.kernel, ts.queues
    ingress, egress = ("lan", "wan") if inp.direction == "up" else ("wan", "lan")
    rx = q.nics.get(ingress)
    tx = q.nics.get(egress)
    fwd = round(100.0 * tx.tx_packets / rx.rx_packets, 1) if rx and tx and rx.rx_packets else None
    # against what was offered over the sender's time: lost datagrams and unsent ones both count
    offered = pps * (t.sent_s or t.duration_s)
    arrived = (t.packets or 0) - (t.lost_packets or 0)
    short = round(100.0 * (1 - arrived / offered), 2) if offered else 100.0
    wall = q.wall_s
    return SatStep(offered_pps=pps, offered_mbps=_mbps(pps, inp.length), received_pps=t.received_pps,
                   loss_pct=t.loss_pct, shortfall_pct=max(0.0, short),
                   stable=short <= inp.loss_max_pct,
                   on_target=t.on_target, cpu_busy_pct=k.total.busy_pct, busiest_cpu=k.busiest_cpu,
                   busiest_softirq_system_pct=k.busiest_softirq_system_pct,
                   ksoftirqd_pct=round(sum(q.ksoftirqd_pct.values()), 1),
                   softnet_squeezed=q.softnet_squeezed, queue_drops=q.queue_drops([ingress, egress]),
                   dut_forwarded_pct=fwd,
                   dut_rx_pps=round(rx.rx_packets / wall, 1) if rx and wall else None)


def name_limit(bad: SatStep | None, inp: SaturateInput) -> tuple[Limit, str]:
    """Which limit the first unstable window hit, and the counters that say so."""
    if bad is None:
        return "not_reached", (f"no rate above the answer was unstable (max_pps {inp.max_pps}, "
                               f"max_windows {inp.max_windows})")
    facts = (f"at {bad.offered_pps} pps offered: {bad.shortfall_pct}% did not arrive (iperf3 "
             f"loss {bad.loss_pct}%), busiest core "
             f"{bad.busiest_cpu} softirq+system {bad.busiest_softirq_system_pct:.0f}% (ceiling "
             f"{inp.cpu_ceiling_pct:g}%), all cores busy {bad.cpu_busy_pct:.0f}%, ksoftirqd "
             f"{bad.ksoftirqd_pct:.0f}% of a core, softnet squeezes {bad.softnet_squeezed}, queue "
             f"drops {bad.queue_drops}, DUT NIC took in {bad.dut_rx_pps} pps and forwarded "
             f"{bad.dut_forwarded_pct}% of it")
    took_in = None if bad.dut_rx_pps is None else bad.dut_rx_pps / bad.offered_pps
    # softirq work spilling into ksoftirqd with NAPI out of budget (softnet squeezes) is a CPU
    # that cannot keep up, even when the tick accounting shows it below the ceiling
    spilled = bad.ksoftirqd_pct >= KSOFTIRQD_BUSY_PCT and bad.softnet_squeezed > 0
    cpu_full = bad.busiest_softirq_system_pct >= inp.cpu_ceiling_pct or \
        bad.cpu_busy_pct >= inp.cpu_ceiling_pct or spilled
    if cpu_full:  # first: a saturated DUT also slows a sender that shares its host (the qlab)
        return "cpu", facts + ("" if bad.on_target else "; the sender also fell short")
    if not bad.on_target and (bad.loss_pct or 0) <= inp.loss_max_pct:
        return "load_host", "the sender could not offer the rate: " + facts
    if bad.queue_drops > 0:
        return "queue", facts
    if took_in is not None and took_in < 0.97:
        return "ingress", facts
    if bad.dut_forwarded_pct is not None and bad.dut_forwarded_pct >= 99.0:
        return "beyond_dut", facts
    return "unknown", facts


async def run(ctx: LabContext, inp: SaturateInput) -> SaturateOutput:
    load = trafficwin.driver(ctx.profile)
    store = RecordStore(ctx.data_dir)
    sid = store.new_id("sat")
    started = datetime.now(UTC)
    windows: list[trafficwin.TrafficStep] = []
    steps: list[SatStep] = []

    async def probe(pps: int) -> SatStep:
        spec = TrafficSpec(proto="udp", direction=inp.direction, length=inp.length,
                           bitrate_mbps=_mbps(pps, inp.length), omit_s=1)
        await ctx.report(len(windows), inp.max_windows + 2, f"{inp.length} B at {pps} pps")
        ts = await trafficwin.measure(ctx.device, ctx.profile, ctx.state, load, spec, inp.window_s)
        windows.append(ts)
        return _step(ts, pps, inp)

    good: SatStep | None = None
    bad: SatStep | None = None
    pps = inp.start_pps
    # bracket: double up while stable, halve down while not
    while len(steps) < inp.max_windows:
        s = await probe(pps)
        steps.append(s)
        if s.stable:
            good = s
            if bad is not None or pps >= inp.max_pps:
                break
            pps = min(pps * 2, inp.max_pps)
        else:
            bad = s if bad is None or s.offered_pps < bad.offered_pps else bad
            if good is not None:
                break
            pps = max(1, pps // 2)
            if pps < 100:
                break
    # bisect (geometric) between the highest stable and the lowest unstable rate
    while good is not None and bad is not None and len(steps) < inp.max_windows \
            and bad.offered_pps > good.offered_pps * (1 + inp.precision_pct / 100):
        s = await probe(int(math.sqrt(good.offered_pps * bad.offered_pps)))
        steps.append(s)
        if s.stable:
            good = s
        else:
            bad = s
    above = below = None
    confirmed = None
    rechecks = 0
    while inp.verify and good is not None:
        above = await probe(int(good.offered_pps * 1.2))
        below = await probe(int(good.offered_pps * 0.8))
        confirmed = not above.stable and below.stable
        if confirmed or rechecks >= inp.rechecks:
            break
        rechecks += 1
        steps += [above, below]
        if above.stable:  # the answer was low: it moves up to the rate the check held
            good = above
        else:  # 0.8x lost: the answer was luck; the highest stable rate below that window
            good = max((s for s in steps if s.stable and s.offered_pps < below.offered_pps),
                       key=lambda s: s.offered_pps, default=None)
    if good is not None:  # the limit is read at the lowest unstable rate above the answer
        over = [s for s in [*steps, above] if s is not None and not s.stable
                and s.offered_pps > good.offered_pps]
        bad = min(over, key=lambda s: s.offered_pps,
                  default=bad if bad is not None and bad.offered_pps > good.offered_pps else None)
    limit, evidence = name_limit(bad, inp)
    out = SaturateOutput(
        saturate_id=sid, length=inp.length, direction=inp.direction, loss_max_pct=inp.loss_max_pct,
        stable_pps=good.offered_pps if good else None,
        stable_mbps=good.offered_mbps if good else None, limit=limit, evidence=evidence,
        steps=steps, verify_above=above, verify_below=below, confirmed=confirmed)
    if inp.baseline is not None:
        out.vs_baseline = _versus(store.load("sat", inp.baseline, SaturateRecord), out)
    store.save("sat", sid, SaturateRecord(id=sid, started_at=started, input=inp, windows=windows,
                                          result=out))
    await ctx.report(inp.max_windows + 2, inp.max_windows + 2, f"saturation {sid} stored")
    return out


def _versus(base: SaturateRecord, out: SaturateOutput) -> VsBaseline:
    b = base.result
    if (b.length, b.direction) != (out.length, out.direction):
        raise ToolError("invalid_input", f"baseline {base.id} is {b.length} B {b.direction}, this "
                        f"run {out.length} B {out.direction}", "compare runs of the same length "
                        "and direction")
    lost_at = b.verify_above.offered_pps if b.verify_above is not None and b.confirmed else None
    change = (round(100.0 * (out.stable_pps - b.stable_pps) / b.stable_pps, 1)
              if out.stable_pps and b.stable_pps else None)
    improved = lost_at is not None and out.stable_pps is not None and out.stable_pps >= lost_at
    rule = (f"improved if stable at >= {lost_at} pps (where the baseline's 1.2x check lost)"
            if lost_at is not None else "the baseline was not confirmed at 1.2x/0.8x: no decision")
    return VsBaseline(baseline_id=base.id, baseline_pps=b.stable_pps, change_pct=change,
                      improved=improved, rule=rule)


SPEC = ToolSpec(name="saturate", description=describe(__doc__), input=SaturateInput,
                output=SaturateOutput, run=run, effect="mutates_dut",
                requires=frozenset({"lease", "board_healthy", "fingerprint_verified"}),
                budget_class="measure", measures=True,
                needs=frozenset({"traffic"}))
