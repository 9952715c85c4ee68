"""A server that outlives its DUT: `labwarden serve` (a real stdio subprocess, the SDK's client)
starts with the vlab's DUT switched off, lists its tools and answers lab_status with `reachable:
false` and the vlab's own remedy; the DUT powered on, the next lab_status reaches it (the
connection comes back by itself), and again after it goes off and on under the server. A bench
DUT's remedy names its address, never a vlab command. Real vlab, real SSH, nothing faked."""

from __future__ import annotations

import os
import tomllib

import anyio
import pytest
from mcp import Client, StdioServerParameters

from labwarden.lab.config import LabProfile
from labwarden.lab.reach import unreachable_remedy
from labwarden.vlab import control
from labwarden.vlab.layout import VlabLayout

from .test_mcp_server import LABWARDEN


def _port(lab: VlabLayout) -> int:
    return int(tomllib.loads(lab.lab_toml.read_text())["dut"]["ssh"]["port"])


async def _status(client: Client) -> dict[str, object]:
    res = await client.call_tool("lab_status", {})
    assert not res.is_error, res.content
    assert res.structured_content is not None
    return res.structured_content


@pytest.mark.anyio
async def test_serve_starts_with_the_dut_off_and_reconnects(fresh_vlab: VlabLayout) -> None:
    lab, port = fresh_vlab, _port(fresh_vlab)
    control.down(lab.root)  # the DUT is off before the server starts
    params = StdioServerParameters(command=LABWARDEN, args=["serve", "--lab", str(lab.lab_toml)],
                                   env={**os.environ})
    async with Client(params) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"lab_status", "build", "flash", "patch_submit"} <= tools
        off = await _status(client)
        assert off["reachable"] is False and off["target_pid"] is None
        assert f"labwarden vlab up --dir {lab.root}" in str(off["remedy"])
        assert any("does not answer" in str(p) for p in off["problems"])  # type: ignore[attr-defined]

        for _cycle in range(2):  # on (from off), then off and on again under the server
            await anyio.to_thread.run_sync(lambda: control.up(lab.root, port=port))
            on = await _status(client)
            assert on["reachable"] is True and on["target_pid"], on
            await anyio.to_thread.run_sync(lambda: control.down(lab.root))
            assert (await _status(client))["reachable"] is False
        await anyio.to_thread.run_sync(lambda: control.up(lab.root, port=port))
        assert (await _status(client))["reachable"] is True


def test_each_kind_of_lab_gets_its_own_remedy(vlab: VlabLayout) -> None:
    prof = LabProfile.from_file(vlab.lab_toml)
    assert "labwarden vlab status --dir" in unreachable_remedy(prof)
    bench = prof.model_copy(update={"lab": prof.lab.model_copy(update={"kind": "real"})})
    text = unreachable_remedy(bench)
    assert "vlab" not in text and "qlab" not in text and f"port {_port(vlab)}" in text
