"""The qlab's traffic variant: a router DUT between two host network namespaces.

    netns lwlan: lan0 192.168.50.2 --veth-- [bridge lwlanbr: tap lwlan0] --virtio-- guest `lan` .50.1
    netns lwwan: wan0 192.168.60.2 --veth-- [bridge lwwanbr: tap lwwan0] --virtio-- guest `wan` .60.1

The guest forwards lan -> wan through the nftables rule set its /etc/config/firewall describes
(`lw-route` in the guest); iperf3 runs in the two namespaces, outside the DUT's CPU. The taps are
persistent and stay in the host's namespace, bridged to a veth whose other end is in the netns:
QEMU opens a tap by name in its own namespace, and a power cycle (a new QEMU) finds them again.

The names are fixed (one traffic qlab per host): `host_up` removes a stale set first, `host_down`
removes everything it made. Root only (`ip netns`, `ip tuntap`).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from labwarden.core.devtext import quote
from labwarden.core.errors import LabError
from labwarden.qlab.envyaml import Nic
from labwarden.qlab.layout import QlabLayout


class TrafficNetError(LabError):
    """The host side of the traffic variant cannot be set up."""

    kind = "device"


@dataclass(frozen=True)
class Side:
    """One side of the router: a host netns with its veth end, a bridge and the guest's tap."""

    name: str
    netns: str
    tap: str
    bridge: str
    veth_host: str
    veth_ns: str
    host_addr: str
    guest_addr: str
    mac: str

    def nic(self) -> Nic:
        return Nic(netdev=f"tap,id={self.name},ifname={self.tap},script=no,downscript=no",
                   device=f"virtio-net-pci,netdev={self.name},mac={self.mac}")


LAN = Side("lan", "lwlan", "lwlan0", "lwlanbr", "lwlan-h", "lan0", "192.168.50.2",
           "192.168.50.1", "52:54:00:12:34:10")
WAN = Side("wan", "lwwan", "lwwan0", "lwwanbr", "lwwan-h", "wan0", "192.168.60.2",
           "192.168.60.1", "52:54:00:12:34:20")
SIDES = (LAN, WAN)
"""lan is where the clients are (iperf3 client); wan is upstream (iperf3 server). The guest's
addresses and MACs are also in its `lw-route`."""


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=30)
    if check and out.returncode != 0:
        raise TrafficNetError(f"`ip {' '.join(argv)}` failed: {quote(out.stderr)}",
                              "the traffic qlab needs root and /dev/net/tun; "
                              "`labwarden qlab down --dir DIR` removes a half-made set")
    return out


def nics() -> list[Nic]:
    return [side.nic() for side in SIDES]


def host_up(layout: QlabLayout) -> None:
    """Create both sides (removing a stale set first) and mark the qlab as a traffic qlab."""
    host_down(layout)
    for s in SIDES:
        _ip("netns", "add", s.netns)
        _ip("-n", s.netns, "link", "set", "lo", "up")
        _ip("tuntap", "add", "dev", s.tap, "mode", "tap")
        # bridged frames must not go through this host's iptables (br_netfilter may be loaded)
        _ip("link", "add", s.bridge, "type", "bridge", "nf_call_iptables", "0",
            "nf_call_ip6tables", "0", "nf_call_arptables", "0")
        _ip("link", "add", s.veth_host, "type", "veth", "peer", "name", s.veth_ns,
            "netns", s.netns)
        for dev in (s.tap, s.veth_host):
            _ip("link", "set", dev, "master", s.bridge)
            _ip("link", "set", dev, "up")
        _ip("link", "set", s.bridge, "up")
        _ip("-n", s.netns, "addr", "add", f"{s.host_addr}/24", "dev", s.veth_ns)
        _ip("-n", s.netns, "link", "set", s.veth_ns, "up")
        other = WAN if s is LAN else LAN
        _ip("-n", s.netns, "route", "add", other.host_addr.rsplit(".", 1)[0] + ".0/24",
            "via", s.guest_addr)
    marker(layout).write_text(json.dumps({s.name: s.netns for s in SIDES}) + "\n")


def host_down(layout: QlabLayout | None = None) -> None:
    """Remove both sides (what exists of them); idempotent."""
    for s in SIDES:
        for dev in (s.veth_host, s.bridge, s.tap):
            _ip("link", "del", dev, check=False)
        _ip("netns", "del", s.netns, check=False)
    if layout is not None:
        marker(layout).unlink(missing_ok=True)


def marker(layout: QlabLayout) -> Path:
    """The file that says a qlab is the traffic variant (down() removes the host side then)."""
    return layout.root / "traffic.json"


def is_traffic(layout: QlabLayout) -> bool:
    return marker(layout).exists()


LOAD_SECTION = f"""[load]
# iperf3 in the host's network namespaces, outside the DUT's CPU: the client on the lan side
# ({LAN.netns}, {LAN.host_addr}), the server upstream ({WAN.netns}, {WAN.host_addr}); the DUT
# routes lan -> wan through its nftables rule set (/etc/config/firewall, `lw-route reload`)
kind = "iperf3"
client = ["ip", "netns", "exec", "{LAN.netns}"]
server = ["ip", "netns", "exec", "{WAN.netns}"]
server_addr = "{WAN.host_addr}"
settle_s = 1.0
# `router_rules` rewrites /etc/config/firewall (rules N, mode chain | set) and reloads it
router_config = "firewall"
router_reload = ["lw-route", "reload"]
"""
"""The traffic qlab's [load] (profile_writer puts it in place of the stations' one)."""
