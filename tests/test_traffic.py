"""The traffic qlab: a router DUT (a Debian kernel under QEMU) between two host network namespaces,
routing lan -> wan through an nftables rule set from its /etc/config/firewall; iperf3 in the
namespaces is the load ([load] kind = "iperf3"). One guest for the module (`labwarden.qlab.control
.up(traffic_router=True)`), brought down at the end with its namespaces and taps.

Nothing is stood in for: the taps, bridges, veths, the guest's virtio NICs, nftables and iperf3 are
real. The figures are TCG's (a slow CPU shared with the host): the tests assert relations (what
iperf3 said = what the driver reports; the DUT's softirq share with and without traffic; loss
above the answer and none below it), never absolute rates.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from labwarden.lab.config import Iperf3LoadSection, LabProfile
from labwarden.lab.drivers import load as load_drivers
from labwarden.lab.drivers.load.iperf3 import Iperf3, TrafficSpec, parse
from labwarden.qlab import traffic
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from tests.qlab_fixtures import Qlab, running_qlab

pytestmark = [pytest.mark.timeout(900), pytest.mark.anyio]


@pytest.fixture(scope="module")
def tq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Qlab]:
    with running_qlab(tmp_path_factory.mktemp("qlab-traffic"), traffic_router=True) as q:
        yield q
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "lwlan" not in netns and "lwwan" not in netns, "qlab down left the traffic netns"
    assert not Path("/sys/class/net/lwlan0").exists(), "qlab down left the lan tap"


def _driver(q: Qlab) -> Iperf3:
    d = load_drivers.for_profile(LabProfile.from_file(q.layout.lab_toml))
    assert isinstance(d, Iperf3)
    return d


async def _ok(q: Qlab, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    async with open_lab(LabProfile.from_file(q.layout.lab_toml)) as ctx:
        rec = await call_tool(ctx, tool, args or {})
    assert rec.ok, (tool, rec.error)
    assert rec.result is not None
    return rec.result


async def _ok_reported(q: Qlab, tool: str, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The tool's result, and the HTML of the report of its session."""
    async with open_lab(LabProfile.from_file(q.layout.lab_toml)) as ctx:
        rec = await call_tool(ctx, tool, args)
        assert rec.ok and rec.result is not None, (tool, rec.error)
        rep = await call_tool(ctx, "report", {"name": f"traffic-{tool}"})
    assert rep.ok and rep.result is not None, rep.error
    return rec.result, Path(rep.result["path"]).read_text()


async def _verified(q: Qlab) -> None:
    prof = LabProfile.from_file(q.layout.lab_toml)
    assert (await _ok(q, "fingerprint_verify", {"build_id": prof.build.baseline}))["verified"]


def test_the_guest_routes_lan_to_wan_through_its_rule_set(tq: Qlab) -> None:
    prof = LabProfile.from_file(tq.layout.lab_toml)
    assert isinstance(prof.load, Iperf3LoadSection) and prof.readers.clients is None
    assert not prof.gates.load_drives_cpu  # stad's CPU does not follow forwarded streams
    assert prof.load.client == ["ip", "netns", "exec", traffic.LAN.netns]
    state = tq.sh("lw-route status; nft list chain inet lw forward | grep -c 'ip saddr 10.99'")
    assert state.ok, state.stderr
    assert "rules=200 mode=chain forward=1 lan=up wan=up wireguard=0 nft_rules=200" in state.stdout
    assert state.stdout.split()[-1] == "200"
    # each side reaches the other only through the guest
    for side, other in ((traffic.LAN, traffic.WAN), (traffic.WAN, traffic.LAN)):
        routes = subprocess.run(["ip", "-n", side.netns, "route"], capture_output=True, text=True)
        net = other.host_addr.rsplit(".", 1)[0] + ".0/24"
        assert f"{net} via {side.guest_addr}" in routes.stdout, routes.stdout


async def test_an_iperf3_window_is_what_iperf3s_own_json_says(tq: Qlab) -> None:
    """The acceptance check: the driver's achieved rate, loss, jitter and series are iperf3's JSON
    (client end.sum_received, the server's intervals), and they add up among themselves."""
    d = _driver(tq)
    spec = TrafficSpec(proto="udp", bitrate_mbps=20, length=1200)
    started = datetime.now(UTC)
    doc = await d.run_json(spec, 3)
    w = parse(doc, spec, started)
    rcv, snt = doc["end"]["sum_received"], doc["end"]["sum_sent"]
    assert w.achieved_mbps == round(rcv["bits_per_second"] / 1e6, 3)
    assert w.sent_mbps == round(snt["bits_per_second"] / 1e6, 3)
    assert w.loss_pct == round(rcv["lost_percent"], 3)
    assert (w.packets, w.lost_packets) == (rcv["packets"], rcv["lost_packets"])
    assert w.loss_pct == pytest.approx(100 * rcv["lost_packets"] / rcv["packets"], abs=0.01)
    assert w.jitter_ms == round(rcv["jitter_ms"], 4)
    server = doc["server_output_json"]["intervals"]
    assert [i.mbps for i in w.intervals] == [round(s["sum"]["bits_per_second"] / 1e6, 3) for s in server]
    received = sum(i.packets or 0 for i in w.intervals)
    assert received == rcv["packets"] - rcv["lost_packets"], "the series adds up to the total"
    # what was asked is checked: 20 Mbit/s of 1200 B datagrams is ~2083 pps offered
    assert w.offered_mbps == 20 and w.offered_pps == pytest.approx(2083.3, abs=0.1)
    assert w.on_target and w.check is None and 0 < w.achieved_mbps <= w.sent_mbps * 1.01
    # TCP, download (-R): retransmits from the sender, the series from the client (the receiver)
    tcp = TrafficSpec(proto="tcp", direction="down", length=1200)
    doc = await d.run_json(tcp, 3)
    w = parse(doc, tcp, started)
    assert w.retransmits == doc["end"]["sum_sent"]["retransmits"] and w.loss_pct is None
    assert w.achieved_mbps == round(doc["end"]["sum_received"]["bits_per_second"] / 1e6, 3) > 0
    assert len(w.intervals) == len(doc["intervals"]) >= 3
    # a rate the sender cannot reach says so (the check, not a silent number)
    short = parse(json.loads(json.dumps(doc)), TrafficSpec(proto="tcp", bitrate_mbps=1e5), started)
    assert not short.on_target and short.check is not None and "offered" in short.check


async def test_traffic_sweep_softirq_under_load_and_idle(tq: Qlab) -> None:
    """A UDP ladder with an idle window, 1000 rules in the chain (so the forward path is real
    work): the DUT's softirq share is non-zero under load and near zero idle; throughput follows
    the offered rate at the low step."""
    await _verified(tq)
    await _ok(tq, "router_rules", {"rules": 1000, "mode": "chain"})
    try:
        out, html = await _ok_reported(tq, "traffic_sweep", {"bitrates_mbps": [5, 30],
                                                             "window_s": 3, "length": 1200})
    finally:
        await _ok(tq, "router_rules", {"rules": 200, "mode": "chain"})
    idle, points = out["idle"], out["points"]
    assert idle is not None and idle["busiest_softirq_system_pct"] < 15, idle
    assert [p["offered_mbps"] for p in points] == [5, 30]
    low, high = points
    assert low["achieved_mbps"] == pytest.approx(5, rel=0.15) and low["loss_pct"] < 5, low
    # the softirq share: non-zero under load (> 1% of both cores at 30 Mbit/s), ~0 idle (the idle
    # window's system share is the guest's own work, dropbear and the snapshots: not asked). The
    # low step (~520 pps) is not ordered against the high one: under tick accounting on a TCG
    # guest sharing 2 host cores with iperf3, a 3 s window there read 0.0 in one CI run and 6.5
    # (above the high step's 4.0) in another. Throughput orders the steps instead (below).
    assert high["softirq_pct"] > 1.0 and low["softirq_pct"] >= 0, points
    assert idle["softirq_pct"] < 2.0 and high["softirq_pct"] > idle["softirq_pct"], (idle, high)
    assert high["cpu_busy_pct"] > idle["busy_pct"] + 5, (idle, high)
    assert high["received_pps"] > low["received_pps"], points
    # the report draws the ladder and lists every step with what iperf3 achieved
    assert 'id="traffic-plot"><svg' in html and html.count('class="traffic-row"') == 2
    assert f"<td>{low['achieved_mbps']:.1f}</td>" in html and "idle (load stopped)" in html


async def test_saturate_answer_is_checked_at_1_2x_and_0_8x(tq: Qlab) -> None:
    """The acceptance check: bracket + bisect give a stable rate, a window at 1.2x loses more than
    the threshold and one at 0.8x does not, and the limit is named with the DUT's counters. 2000
    rules in the chain (router_rules) make the DUT's forward path the bottleneck."""
    await _verified(tq)
    set_rules = await _ok(tq, "router_rules", {"rules": 2000, "mode": "chain"})
    assert "rules=2000 mode=chain" in set_rules["after"]
    try:
        async with open_lab(LabProfile.from_file(tq.layout.lab_toml)) as ctx:  # one report
            sat = await call_tool(ctx, "saturate", {
                "length": 100, "loss_max_pct": 5, "start_pps": 500, "window_s": 3,
                "precision_pct": 25, "max_windows": 8})
            assert sat.ok and sat.result is not None, sat.error
            out = sat.result
            checked = await call_tool(ctx, "gate_check", {"saturate_id": out["saturate_id"]})
            rep = await call_tool(ctx, "report", {"name": "traffic-saturate"})
    finally:
        await _ok(tq, "router_rules", {"rules": 200, "mode": "chain"})
    assert out["stable_pps"] is not None and out["confirmed"] is True, out
    assert out["verify_above"]["shortfall_pct"] > 5 >= out["verify_below"]["shortfall_pct"]
    assert out["verify_above"]["offered_pps"] == int(out["stable_pps"] * 1.2)
    assert out["limit"] in ("cpu", "queue", "ingress"), out["evidence"]
    assert "softirq+system" in out["evidence"] and "pps" in out["evidence"]
    # the traffic gates: the check held, the sender reached every stable rate, conditions verified
    assert checked.ok and checked.result is not None, checked.error
    gates = {g["name"]: g for g in checked.result["gates"]}
    assert set(gates) == {"saturation_confirmed", "load_on_target", "conditions_verified"}
    assert checked.result["passed"] and checked.result["failed"] == [], gates
    assert f"answer {out['stable_pps']} pps" in gates["saturation_confirmed"]["evidence"]
    assert rep.ok and rep.result is not None, rep.error
    html = Path(rep.result["path"]).read_text()
    # the report draws delivered vs offered pps and names the answer and its limit
    assert 'id="saturation-plot"><svg' in html and html.count('class="saturation-row"') == 1
    assert f"<td>{out['stable_pps']}</td>" in html and f'<td class="l">{out["limit"]}</td>' in html


async def test_hold_runs_tcp_streams_until_released(tq: Qlab) -> None:
    """The LoadDriver seam: hold(2) keeps traffic flowing through the DUT, hold(0) stops it."""
    d = _driver(tq)

    def forwarded() -> int:
        res = tq.sh("cat /sys/class/net/wan/statistics/tx_packets")
        return int(res.stdout)

    await d.hold(2)
    try:
        a = await asyncio.to_thread(forwarded)
        await asyncio.sleep(1.5)
        assert await asyncio.to_thread(forwarded) - a > 100
    finally:
        await d.hold(0)
    await asyncio.sleep(0.5)
    a = await asyncio.to_thread(forwarded)
    await asyncio.sleep(1.5)
    assert await asyncio.to_thread(forwarded) - a < 50


async def test_sweep_measures_a_real_idle_baseline_when_the_load_stops(tq: Qlab) -> None:
    """`sweep` on a traffic lab: each point's idle CPU comes from its own windows with the load
    stopped (an idle profile record), not a copy of the loaded number."""
    await _verified(tq)
    await _ok(tq, "env_pin", {})
    out = await _ok(tq, "sweep", {"densities": [2], "reps": 1, "window_s": 2, "perf": False})
    assert out["idle_note"].startswith("idle = the same point with the load stopped")
    data = LabProfile.from_file(tq.layout.lab_toml).lab.data_dir
    kinds = [json.loads(p.read_text())["kind"] for p in Path(data, "records", "prof").glob("*.json")]
    assert "idle" in kinds and "loaded" in kinds
    assert out["points"][0]["idle_cpu_mean"] is not None


async def test_wireguard_on_and_off(tq: Qlab) -> None:
    """router_rules {wireguard}: lan -> wan through a WireGuard tunnel (both ends in the guest: wg0,
    and wg1 in its netns wgpeer holding wan), traffic still flows and crosses wg0; off again
    restores the plain path."""
    on = await _ok(tq, "router_rules", {"rules": 200, "mode": "chain", "wireguard": True})
    try:
        assert "wireguard=1" in on["after"] and "wan=up" in on["after"]
        w = await _driver(tq).window(TrafficSpec(proto="udp", bitrate_mbps=5, length=1200), 3)
        assert w.achieved_mbps > 3, w
        tx = await asyncio.to_thread(tq.sh, "wg show wg0 transfer")
        assert tx.ok and int(tx.stdout.split()[-1]) > 1_000_000, tx.stdout  # bytes sent through it
    finally:
        off = await _ok(tq, "router_rules", {"rules": 200, "mode": "chain", "wireguard": False})
    assert "wireguard=0" in off["after"] and "wan=up" in off["after"]
    left = await asyncio.to_thread(tq.sh, "ip netns list | grep -c wgpeer")
    assert left.stdout.strip() == "0"
