"""`serve` picks up an edited lab profile without a restart: the next call uses it, the change is
a Note in the same transcript session; an invalid edit is refused and the profile in use kept;
a [dut.ssh] change reaches the new address.

Real parts: the server as `labwarden serve` builds it, the SDK's in-memory client, the real
transcript store; the vlab's profile (tests/labkinds.py) with its DUT not up, so lab_status
answers `reachable: false` with the profile's workload (no SSH server needed)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import asyncssh
import pytest
from mcp import Client

from labwarden.lab.config import LabProfile
from labwarden.runtime.session import default_transcript
from labwarden.server.app import build_server
from labwarden.transcripts.store import TranscriptStore
from tests import labkinds

pytestmark = pytest.mark.anyio


async def _status(client: Client) -> dict[str, Any]:
    res = await client.call_tool("lab_status", {})
    assert not res.is_error, res.content
    got: dict[str, Any] | None = res.structured_content
    assert got is not None
    return got


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    before = path.stat().st_mtime_ns
    path.write_text(text.replace(old, new, 1))
    os.utime(path, ns=(before + 1_000_000, before + 1_000_000))  # a coarse clock: still a change


def _profile(root: Path) -> LabProfile:
    """The vlab's profile, with a client key where it names one (the vlab is not brought up)."""
    profile = labkinds.vlab(root)
    assert profile.dut.ssh is not None
    key = Path(profile.dut.ssh.key)
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(key))
    return profile


async def test_an_edit_is_used_by_the_next_call_and_noted(tmp_path: Path) -> None:
    profile = _profile(tmp_path / "vlab")
    assert profile.source
    lab = Path(profile.source)
    async with Client(build_server(profile)) as client:
        first = await _status(client)
        assert first["workload"]["load_drives_cpu"] is True

        _edit(lab, "load_drives_cpu = true", "load_drives_cpu = false")
        second = await _status(client)
        assert second["workload"]["load_drives_cpu"] is False  # the edited [gates], no restart

        _edit(lab, "load_drives_cpu = false", 'load_drives_cpu = "maybe"')  # invalid: refused
        third = await _status(client)
        assert third["workload"]["load_drives_cpu"] is False  # the profile in use is kept

        port = re.search(r"\nport = (\d+)", lab.read_text())
        assert port
        _edit(lab, "load_drives_cpu = \"maybe\"", "load_drives_cpu = true")
        _edit(lab, f"\nport = {port.group(1)}\n", "\nport = 2\n")  # a new DUT address
        fourth = await _status(client)
        assert fourth["workload"]["load_drives_cpu"] is True
        assert any("127.0.0.1:2 " in p for p in fourth["problems"]), fourth["problems"]

    store = TranscriptStore(default_transcript(profile))
    try:
        sessions = store.sessions()
        assert len(sessions) == 1  # one story: no restart split it
        events = [{**json.loads(r.body), "kind": r.kind} for r in store.rows(sessions[0].id)]
    finally:
        store.close()
    notes = [e["text"] for e in events if e.get("kind") == "note"]
    assert len(notes) == 3, notes
    assert "reloaded: [gates] changed" in notes[0]
    assert "refused" in notes[1] and "gates.load_drives_cpu" in notes[1], notes[1]
    assert "[dut], [gates] changed" in notes[2]
    calls = [e for e in events if e.get("kind") == "tool_called"]
    assert len(calls) == 4
    order = [e.get("kind") for e in events if e.get("kind") in ("note", "tool_called")]
    assert order == ["tool_called", "note", "tool_called", "note", "tool_called", "note",
                     "tool_called"], order


async def test_a_moved_data_dir_is_refused(tmp_path: Path) -> None:
    profile = _profile(tmp_path / "vlab")
    assert profile.source
    lab = Path(profile.source)
    async with Client(build_server(profile)) as client:
        await _status(client)
        was = re.search(r"\ndata_dir = (.*)\n", lab.read_text())
        assert was
        _edit(lab, f"\ndata_dir = {was.group(1)}\n",
              f"\ndata_dir = {json.dumps(str(tmp_path / 'elsewhere'))}\n")
        await _status(client)
    assert not (tmp_path / "elsewhere").exists()
    store = TranscriptStore(default_transcript(profile))
    try:
        (only,) = store.sessions()
        notes = [json.loads(r.body)["text"] for r in store.rows(only.id) if r.kind == "note"]
    finally:
        store.close()
    assert len(notes) == 1 and "refused" in notes[0] and "data_dir moved" in notes[0], notes


async def test_labwarden_serve_on_stdio_reloads(tmp_path: Path) -> None:
    """The same through `labwarden serve`, a real stdio subprocess: an edit between two calls."""
    from mcp import StdioServerParameters

    from .test_mcp_server import LABWARDEN

    profile = _profile(tmp_path / "vlab")
    assert profile.source
    lab = Path(profile.source)
    params = StdioServerParameters(command=LABWARDEN, args=["serve", "--lab", str(lab)],
                                   env={**os.environ})
    async with Client(params) as client:
        assert (await _status(client))["workload"]["load_drives_cpu"] is True
        _edit(lab, "load_drives_cpu = true", "load_drives_cpu = false")
        assert (await _status(client))["workload"]["load_drives_cpu"] is False
    store = TranscriptStore(default_transcript(profile))
    try:
        (only,) = store.sessions()
        notes = [json.loads(r.body)["text"] for r in store.rows(only.id) if r.kind == "note"]
    finally:
        store.close()
    assert len(notes) == 1 and "reloaded: [gates] changed" in notes[0], notes
