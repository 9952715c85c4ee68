"""Browsable MCP resources through the SDK's real client (in memory, over a real vlab): what
`resources/list` shows after real work, and what it never shows."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from labwarden.lab.config import LabProfile
from labwarden.server.app import build_server
from labwarden.server.browse import STATIC
from labwarden.vlab.layout import VlabLayout

from .tooling import baseline

pytestmark = pytest.mark.anyio
STATIC_URIS = {r.uri for r in STATIC}


def _profile(lab: VlabLayout, data_dir: Path | None = None) -> LabProfile:
    prof = LabProfile.from_file(lab.lab_toml)
    if data_dir is None:
        return prof
    return prof.model_copy(update={"lab": prof.lab.model_copy(update={"data_dir": str(data_dir)})})


async def test_an_empty_data_dir_lists_only_the_static_resources(lab: VlabLayout,
                                                                 tmp_path: Path) -> None:
    async with Client(build_server(_profile(lab, tmp_path / "data"))) as client:
        listed = (await client.list_resources()).resources
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        sweeps = await client.read_resource("labwarden://records/sweeps")
    assert [r.uri for r in listed] == [r.uri for r in STATIC]
    assert all(r.title and r.description and r.mime_type == "application/json" for r in listed)
    assert json.loads(sweeps.contents[0].text) == []  # type: ignore[union-attr]
    # the templates still stand beside the list (the new one included)
    assert {"labwarden://lab/{view}", "labwarden://records/{kind}/{rid}",
            "labwarden://symbolized/{key}/{name}", "labwarden://reports/{name}"} <= templates


async def test_after_real_work_every_listed_resource_reads_back(lab: VlabLayout) -> None:
    """A sweep (perf at its densest point), a second profile, symbolize of both with a
    differential, and a report: each shows up, named for what it is, and reads back with the
    MIME type it was listed with."""
    async with Client(build_server(_profile(lab))) as client:
        assert not (await client.call_tool("fingerprint_verify", {"build_id": baseline(lab)})).is_error
        sweep = await client.call_tool("sweep", {"densities": [6, 18], "reps": 1, "window_s": 2,
                                                 "label": "baseline"})
        assert not sweep.is_error, sweep.content
        sweep_id = sweep.structured_content["sweep_id"]  # type: ignore[index]
        dense_pid = sweep.structured_content["points"][-1]["profile_id"]  # type: ignore[index]
        other = await client.call_tool("measure", {"stations": 6, "window_s": 2, "reps": 1})
        assert not other.is_error, other.content
        other_pid = other.structured_content["profile_id"]  # type: ignore[index]
        base = await client.call_tool("symbolize", {"profile_id": other_pid})
        assert not base.is_error, base.content
        sym = await client.call_tool("symbolize", {"profile_id": dense_pid,
                                                   "baseline_profile_id": other_pid})
        assert not sym.is_error, sym.content
        key, base_key = sym.structured_content["key"], base.structured_content["key"]  # type: ignore[index]
        rep = await client.call_tool("report", {"name": "story", "title": "CPU <vs> clients"})
        assert not rep.is_error, rep.content

        listed = {r.uri: r for r in (await client.list_resources()).resources}
        reads = {uri: (await client.read_resource(uri)).contents[0] for uri in listed}

    s = listed[f"labwarden://records/sweeps/{sweep_id}"]
    assert s.title is not None and "'baseline'" in s.title and "6/18 clients" in s.title
    assert baseline(lab) in s.title and s.mime_type == "application/json"
    p = listed[f"labwarden://records/profiles/{dense_pid}"]
    assert p.title is not None and "18 stations" in p.title
    flame = listed[f"labwarden://symbolized/{key}/flame.svg"]
    assert flame.mime_type == "image/svg+xml" and dense_pid in (flame.title or "")
    diff = listed[f"labwarden://symbolized/{key}/diff-{base_key}.svg"]
    assert diff.title == f"differential flame graph {other_pid} (6 stations, build " \
        f"{baseline(lab)}) -> {dense_pid} (18 stations, build {baseline(lab)})"
    report = listed["labwarden://reports/story.html"]
    assert report.mime_type == "text/html" and report.title == "report: CPU <vs> clients"
    # newest first within a kind: the profile made last comes before the sweep's
    uris = list(listed)
    assert uris.index(f"labwarden://records/profiles/{other_pid}") < \
        uris.index(f"labwarden://records/profiles/{dense_pid}")
    for uri, resource in listed.items():
        content = reads[uri]
        assert content.mime_type == resource.mime_type, uri
        text = content.text  # type: ignore[union-attr]
        if resource.mime_type == "application/json":
            json.loads(text)
        elif resource.mime_type == "image/svg+xml":
            assert "<svg" in text, uri
        else:
            assert "<html" in text and "CPU &lt;vs&gt; clients" in text, uri
        if resource.size is not None:
            assert resource.size == len(text.encode()), uri
    assert "dm_finalize_transaction" in reads[flame.uri].text  # type: ignore[union-attr]


async def test_a_symlink_out_of_the_data_dir_is_neither_listed_nor_read(lab: VlabLayout,
                                                                       tmp_path: Path) -> None:
    data = tmp_path / "data"
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "page.html").write_text("<html><title>secret</title></html>")
    (outside / "flame.svg").write_text("<svg>secret</svg>")
    (outside / "swp-0123456789ab.json").write_text("{}")
    for sub in ("reports", "records/swp", "symbolized/0123456789abcdef"):
        (data / sub).mkdir(parents=True)
    (data / "reports" / "evil.html").symlink_to(outside / "page.html")
    (data / "reports" / "fine.html").write_text("<html><title>fine</title></html>")
    (data / "records" / "swp" / "swp-0123456789ab.json").symlink_to(outside / "swp-0123456789ab.json")
    (data / "symbolized" / "0123456789abcdef.json").write_text(json.dumps({"perf_data": "x"}))
    (data / "symbolized" / "0123456789abcdef" / "flame.svg").symlink_to(outside / "flame.svg")
    (data / "symbolized" / "fedcba9876543210").symlink_to(outside, target_is_directory=True)
    shutil.copy(data / "symbolized" / "0123456789abcdef.json", data / "symbolized" / "fedcba9876543210.json")
    async with Client(build_server(_profile(lab, data))) as client:
        uris = {r.uri for r in (await client.list_resources()).resources}
        fine = await client.read_resource("labwarden://reports/fine.html")
        with pytest.raises(MCPError, match=r"no report evil\.html"):
            await client.read_resource("labwarden://reports/evil.html")
    assert uris - STATIC_URIS == {"labwarden://reports/fine.html"}
    assert not any(re.search("secret|evil", u) for u in uris)
    assert fine.contents[0].mime_type == "text/html"
