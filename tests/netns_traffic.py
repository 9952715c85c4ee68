"""Real packets on this kernel for kernel-attribution tests: two network namespaces joined by a
veth pair, an nftables rule set of N non-matching rules on the receiver's input hook, and iperf3
between them. The vlab's DUT runs on this same kernel, so its `perf record -a` and /proc/stat see
this traffic. Everything is removed on exit, also when the test fails (deleting a namespace
deletes its veth end, its rule set and its sockets; the iperf3 processes are killed first).

Names carry this process's pid (`lwk<pid>a`/`lwk<pid>b`), so concurrent runs and the qlab's own
namespaces (lwlan, lwwan) are never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .ci_skips import missing

SERVER_IP, CLIENT_IP, PORT = "10.201.0.2", "10.201.0.1", 5299


def rule_set(rules: int) -> str:
    """`rules` rules that every test packet walks and none matches (their source is TEST-NET-1),
    so each packet costs the whole chain walk: nft_do_chain, as in seed 001's big stack."""
    lines = ["table inet lwk {", " chain input {",
             "  type filter hook input priority filter; policy accept;"]
    lines += [f"  ip saddr 192.0.2.{i % 250 + 1} udp dport {10000 + i} counter drop"
              for i in range(rules)]
    return "\n".join([*lines, " }", "}", ""])


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=10)


@dataclass
class Load:
    summary: dict[str, Any] | None = None
    """iperf3's `end.sum` (UDP: packets, lost_packets, lost_percent, bits_per_second, seconds)."""


@dataclass
class NetnsPair:
    client: str
    server: str

    @contextlib.contextmanager
    def udp_load(self, seconds: float, length: int = 100, wait: bool = False) -> Iterator[Load]:
        """iperf3 UDP client -> server at an unlimited rate with `length`-byte payloads (small
        packets: the per-packet cost dominates) for `seconds`; stopped on exit -- or, with
        `wait`, let finish, its `--json` summary in the yielded Load."""
        load = Load()
        server = subprocess.Popen(["ip", "netns", "exec", self.server, "iperf3", "-s", "-1",
                                   "-p", str(PORT)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        client = None
        try:
            time.sleep(0.3)  # the server's listen socket
            client = subprocess.Popen(["ip", "netns", "exec", self.client, "iperf3", "-c",
                                       SERVER_IP, "-p", str(PORT), "-u", "-b", "0", "-l",
                                       str(length), "-t", f"{seconds:g}", "--json"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            time.sleep(0.5)  # past the connection set-up
            yield load
            if wait:
                out, _ = client.communicate(timeout=seconds + 30)
                load.summary = json.loads(out)["end"]["sum"]
        finally:
            for p in (client, server):
                if p is not None and p.poll() is None:
                    p.kill()
                if p is not None:
                    p.wait(timeout=10)


def tools_or_missing() -> None:
    if os.geteuid() != 0:
        missing("network namespaces and nftables need root")
    for tool, package in (("iperf3", "iperf3"), ("nft", "nftables"), ("ip", "iproute2")):
        if shutil.which(tool) is None:
            missing(f"{tool} not installed (apt-get install {package}: needs iperf3 and nftables)")


@contextlib.contextmanager
def netns_pair(rules: int) -> Iterator[NetnsPair]:
    """The two namespaces, the veth pair and the rule set; all removed on exit."""
    tools_or_missing()
    tag = f"lwk{os.getpid()}"
    pair = NetnsPair(client=f"{tag}a", server=f"{tag}b")
    try:
        for ns in (pair.client, pair.server):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", f"{tag}0", "netns", pair.client, "type", "veth", "peer", "name",
            f"{tag}1", "netns", pair.server)
        _ip("-n", pair.client, "addr", "add", f"{CLIENT_IP}/24", "dev", f"{tag}0")
        _ip("-n", pair.server, "addr", "add", f"{SERVER_IP}/24", "dev", f"{tag}1")
        _ip("-n", pair.client, "link", "set", f"{tag}0", "up")
        _ip("-n", pair.server, "link", "set", f"{tag}1", "up")
        subprocess.run(["ip", "netns", "exec", pair.server, "nft", "-f", "-"], check=True,
                       input=rule_set(rules), text=True, capture_output=True, timeout=30)
        yield pair
    finally:
        for ns in (pair.client, pair.server):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def netns_names() -> list[str]:
    """The namespaces that exist now (to check a clean-up)."""
    run = Path("/run/netns")
    return sorted(p.name for p in run.iterdir()) if run.is_dir() else []
