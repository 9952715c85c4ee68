"""Stock SSH servers for tests: Debian's OpenSSH sshd and dropbear (labwarden.vlab.stockssh) in
front of a vlab, so every tool runs against a server labwarden did not write."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwarden.lab.config import LabProfile
from labwarden.vlab import stockssh
from labwarden.vlab.layout import VlabLayout

KINDS = pytest.mark.parametrize("kind", stockssh.SERVERS)


def serve(kind: stockssh.ServerKind, root: Path) -> Iterator[stockssh.StockSsh]:
    """A running `kind` server (skips with the reason when this host cannot run it)."""
    why = stockssh.unavailable(kind)
    if why:
        pytest.skip(f"{kind}: {why}")
    server = stockssh.start(kind, root)
    try:
        yield server
    finally:
        server.stop()


def behind(layout: VlabLayout, server: stockssh.StockSsh) -> LabProfile:
    """The vlab's own profile, with the DUT reached through `server` instead of the vlab's sshd."""
    data = tomllib.loads(layout.lab_toml.read_text())
    ep = server.endpoint()
    data["dut"]["ssh"] = {"host": ep.host, "port": ep.port, "user": ep.user, "key": ep.key,
                          "host_key": ep.host_key}
    return LabProfile.from_dict(data, layout.lab_toml)
