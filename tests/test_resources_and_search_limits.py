"""The smaller holes of issue 25, each through the door an attacker would use: the `patches`
resource does not follow symlinks planted in data/patches; a dangling symlink in a records
directory is a clean error (CLI and MCP), not a traceback or a host path; an experiment on an
unknown patch is refused before the guard heals, leases or flashes anything; `resources/list`
and `prompts/get` leave transcript rows; a catastrophic regex without ripgrep cannot hold the
server (a concurrent lab_status answers while the search still runs, both calls are logged);
over HTTP one principal's patch_submit result does not name another principal's session. Real
vlab, the SDK's client, `labwarden serve --http`, typer's runner."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.events import GuardDecision, RequestServed, ToolCalled
from labwarden.lab.config import LabProfile
from labwarden.lab.host import sourcetree
from labwarden.server.app import build_server
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import tuning
from labwarden.vlab.layout import VlabLayout

from .diffing import git_diff, replace
from .httplab import stop
from .patching import BULK
from .test_mcp_server import serve_principals
from .tooling import call

pytestmark = pytest.mark.anyio
runner = CliRunner()
SECRET = "LW-PLANTED-SECRET-5e1d"


def _events(lab: VlabLayout) -> list[Any]:
    """Every event of every session, oldest first."""
    store = TranscriptStore(lab.data_dir / "transcripts.db")
    return [e.event for e in sorted((e for s in store.sessions() for e in store.events(s.id)),
                                    key=lambda e: (e.event.ts, e.seq))]


async def test_the_patches_resource_follows_no_planted_symlink(vlab: VlabLayout, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    store = vlab.data_dir / "patches"
    store.mkdir(parents=True, exist_ok=True)
    meta = {"id": "evil-0123456789", "name": "evil", "sha256": "0" * 64, "files": ["hal.c"],
            "ref": "HEAD", "base_commit": "0" * 40, "submitted_at": "2026-11-26T00:00:00Z"}
    outside = tmp_path / "meta.json"
    outside.write_text(json.dumps(meta))
    (store / "evil-0123456789.json").symlink_to(outside)      # a meta from outside the store
    (store / "evil-0123456789.patch").symlink_to(secret)      # its "diff": a host file
    (store / "dang-0123456789.json").symlink_to(tmp_path / "gone.json")  # dangling
    try:
        async with Client(build_server(LabProfile.from_file(vlab.lab_toml))) as client:
            index = (await client.read_resource("labwarden://patches/index")).contents[0].text  # type: ignore[union-attr]
            for pid in ("evil-0123456789", "dang-0123456789"):
                with pytest.raises(MCPError) as err:
                    await client.read_resource(f"labwarden://patches/{pid}")
                assert f"no submitted patch '{pid}'" in str(err.value) and str(tmp_path) not in str(err.value)
        assert "evil" not in index and SECRET not in index
    finally:
        for name in ("evil-0123456789.json", "evil-0123456789.patch", "dang-0123456789.json"):
            (store / name).unlink()


async def test_a_dangling_record_symlink_is_a_clean_error(vlab: VlabLayout, tmp_path: Path) -> None:
    swp = vlab.data_dir / "records" / "swp"
    swp.mkdir(parents=True, exist_ok=True)
    link = swp / "swp-00000000dead.json"
    link.symlink_to(tmp_path / "nowhere.json")
    try:
        async with Client(build_server(LabProfile.from_file(vlab.lab_toml))) as client:
            listed = json.loads((await client.read_resource("labwarden://records/sweeps")).contents[0].text)  # type: ignore[union-attr]
            assert "swp-00000000dead" not in listed
            with pytest.raises(MCPError) as err:
                await client.read_resource("labwarden://records/sweeps/swp-00000000dead")
            assert "swp-00000000dead" in str(err.value) and "leads outside" in str(err.value)
            assert str(tmp_path) not in str(err.value) and "Errno" not in str(err.value)
            res = await client.call_tool("compare", {"baseline": "swp-00000000dead",
                                                     "candidate": "swp-00000000beef"})
            text = res.content[0].text  # type: ignore[union-attr]
            assert res.is_error and "leads outside" in text and "Errno" not in text, text

        def cli() -> Any:
            return runner.invoke(app, ["call", "compare", json.dumps(
                {"baseline": "swp-00000000dead", "candidate": "swp-00000000beef"}),
                "--lab", str(vlab.lab_toml)])

        out = await anyio.to_thread.run_sync(cli)
        assert out.exit_code in (1, 2) and (out.exception is None or isinstance(out.exception, SystemExit))
        assert "Traceback" not in out.output and "leads outside" in out.output, out.output
    finally:
        link.unlink()


async def test_an_unknown_experiment_patch_is_refused_before_any_guard_side_effect(lab: VlabLayout) -> None:
    tuning.set_governor(lab, "schedutil")  # the guard would heal this (policy heal: governor)
    try:
        rec = await call(lab, "experiment", {"patch": "no-such-patch"})
        assert rec.error and rec.error.kind == "invalid_input" and "no-such-patch" in rec.error.message
        assert set(tuning.read_state(lab).governors) == {"schedutil"}  # not healed
        assert not (lab.run_dir / "labwarden.lease").exists()  # no lease taken
        last = [e for e in _events(lab) if isinstance(e, GuardDecision)][-1]
        assert last.tool == "experiment" and last.decision == "refuse" and last.code == "invalid_input"
    finally:
        tuning.set_governor(lab, "performance")


async def test_listings_and_prompts_are_logged(vlab: VlabLayout) -> None:
    before = len(_events(vlab))
    async with Client(build_server(LabProfile.from_file(vlab.lab_toml))) as client:
        listed = (await client.list_resources()).resources
        prompts = (await client.list_prompts()).prompts
        got = await client.get_prompt(prompts[0].name, {})
        with pytest.raises(MCPError):
            await client.get_prompt("no-such-prompt", {})
    served = [e for e in _events(vlab)[before:] if isinstance(e, RequestServed)]
    by = {(e.method, e.name): e for e in served}
    assert by[("resources/list", None)].ok and by[("resources/list", None)].items == len(listed)
    assert by[("prompts/list", None)].items == len(prompts)
    first = by[("prompts/get", prompts[0].name)]
    assert first.ok and first.items == len(got.messages)
    assert not by[("prompts/get", "no-such-prompt")].ok


async def test_a_catastrophic_regex_cannot_hold_the_server(vlab: VlabLayout,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """ripgrep made unfindable (its lookup stubbed: uninstalling it is not a test's to do), so
    the Python fallback runs -- in its child process."""
    monkeypatch.setattr(sourcetree, "ripgrep", lambda: None)
    before = len(_events(vlab))
    async with Client(build_server(LabProfile.from_file(vlab.lab_toml))) as client:
        searched: dict[str, Any] = {}

        async def search() -> None:
            searched["res"] = await client.call_tool("source_search", {"pattern": "(.|.)*Z"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(search)
            await anyio.sleep(1.0)  # the search is matching by now
            t0 = time.monotonic()
            status = await client.call_tool("lab_status", {})
            answered = time.monotonic() - t0
            # an order, not a time (the host is shared): the answer came while the search ran
            still_matching = "res" not in searched
        res = searched["res"]
    print(f"\nlab_status answered in {answered * 1000:.0f} ms while (.|.)*Z was matching")
    assert not status.is_error and still_matching, answered
    assert res.is_error and "took over" in res.content[0].text  # type: ignore[union-attr]
    called = {e.call.tool: e.call for e in _events(vlab)[before:] if isinstance(e, ToolCalled)}
    assert "source_search" in called and "lab_status" in called, called
    # and by the server's own records: lab_status began after the search did and ended before
    # it -- it ran inside the search, an order again; a server that ran one call at a time
    # would have begun it only once the search had ended (or was stopped at its cap)
    search, status_call = called["source_search"], called["lab_status"]
    assert search.started_at < status_call.started_at, (search, status_call)
    assert (status_call.started_at + timedelta(seconds=status_call.duration_s)
            < search.started_at + timedelta(seconds=search.duration_s)), (search, status_call)


async def test_over_http_a_patch_author_is_shown_to_its_own_principal_only(vlab: VlabLayout,
                                                                           tmp_path: Path) -> None:
    proc, client = serve_principals(vlab, tmp_path, "alice", "bob", timeout=120)

    diff = git_diff(vlab.src, replace("hal.c", *BULK))
    args = {"name": "shared-bulk", "diff": diff}
    try:
        async with client("alice") as alice, client("bob") as bob:
            mine = await alice.call_tool("patch_submit", args)
            assert not mine.is_error, mine.content
            theirs = await bob.call_tool("patch_submit", args)  # the same diff: a cache hit
            assert not theirs.is_error, theirs.content
            a, b = mine.structured_content, theirs.structured_content
            assert a and b and b["cached"] and b["patch_id"] == a["patch_id"]
            assert a["author"] and b["author"] is None
            text = (await bob.read_resource("labwarden://patches/index")).contents[0].text  # type: ignore[union-attr]
            assert a["author"] not in text and a["author"] not in json.dumps(b)
            own = (await alice.read_resource("labwarden://patches/index")).contents[0].text  # type: ignore[union-attr]
            assert a["author"] in own
    finally:
        stop(proc)
