"""Submitted patches belong to their principal (lab/host/patchstore.py, README "Over HTTP"): over
HTTP with named tokens, bob can neither list, read, build, experiment on, base a patch on, nor
search, build or bisect the commit a build of alice's patch made -- to him it does not exist,
whatever spelling he tries (its id, a prefix of its name, its file's path, that commit) -- while
alice can; once
alice submits it `shared`, bob lists and builds it too. A real `labwarden serve --http`, the
SDK's client, a real vlab build. Before, bob could do all of it (only the author was masked)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from labwarden.vlab.layout import VlabLayout

from .httplab import stop
from .patching import BULK, change
from .test_mcp_server import serve_principals

pytestmark = pytest.mark.anyio


def _ok(res: Any) -> dict[str, Any]:
    assert not res.is_error, res.content
    out: dict[str, Any] = res.structured_content
    return out


def _refused(res: Any) -> str:
    assert res.is_error, res.structured_content
    text: str = res.content[0].text
    return text


async def _index(client: Client) -> list[str]:
    got = json.loads((await client.read_resource("labwarden://patches/index")).contents[0].text)  # type: ignore[union-attr]
    return [m["id"] for m in got]


async def test_a_patch_is_its_principals_unless_shared(vlab: VlabLayout, tmp_path: Path) -> None:
    proc, client = serve_principals(vlab, tmp_path, "alice", "bob", timeout=300)

    submit = {"name": "alicebulk", "diff": change("hal.c", *BULK), "summary": "bulk pull"}
    try:
        async with client("alice") as alice, client("bob") as bob:
            pid = _ok(await alice.call_tool("patch_submit", submit))["patch_id"]
            built = _ok(await alice.call_tool("build", {"patches": [pid]}))
            commit = built["git_hash"]
            # alice: hers to list, read, build and search
            assert pid in await _index(alice)
            one = json.loads((await alice.read_resource(f"labwarden://patches/{pid}")).contents[0].text)  # type: ignore[union-attr]
            assert one["diff"] == submit["diff"] and one["principal"] == "bearer:alice"
            found = _ok(await alice.call_tool("source_search", {"pattern": "return 1;",
                                                                 "ref": commit, "path_glob": "hal.c"}))
            assert found["total"] >= 1

            # bob: it does not exist, by any name
            assert pid not in await _index(bob)
            with pytest.raises(MCPError, match="no submitted patch") as exc:
                await bob.read_resource(f"labwarden://patches/{pid}")
            assert pid not in str(exc.value).split("known:")[-1]
            path = str(vlab.data_dir / "patches" / f"{pid}.patch")
            for ref in (pid, "alicebulk", path):
                text = _refused(await bob.call_tool("build", {"patches": [ref]}))
                assert "unknown patch" in text and "remedy" in text, text
                assert pid not in text.replace(repr(ref)[1:-1], ""), text  # named only as asked
            for tool, args in (("build", {"patches": ["nosuch"]}),
                               ("experiment", {"patch": "nosuch"}),
                               ("patch_submit", {"name": "x", "diff": submit["diff"],
                                                 "base_patches": ["nosuch"]})):
                text = _refused(await bob.call_tool(tool, args))  # the list names none of hers
                assert "unknown patch" in text and "0901" in text and "alicebulk" not in text, text
            text = _refused(await bob.call_tool("experiment", {"patch": pid}))
            assert "unknown patch" in text, text
            text = _refused(await bob.call_tool("patch_submit", {
                "name": "onalice", "diff": change("hal.c", "return 0;", "return 0; "),
                "base_patches": [pid]}))
            assert "unknown patch" in text, text
            for tool, args in (("source_search", {"pattern": "return 1;", "ref": commit}),
                               ("source_read", {"path": "hal.c", "ref": commit}),
                               ("build", {"ref": commit}),  # the build's commit is the patch
                               ("bisect", {"good": "HEAD~1", "bad": commit}),
                               ("experiment", {"patch": "0901", "ref": commit})):
                text = _refused(await bob.call_tool(tool, args))
                assert "no commit" in text, text
            # the firmware's own history stays readable to everyone
            _ok(await bob.call_tool("source_read", {"path": "hal.c", "ref": "HEAD"}))

            # shared on purpose: submitted again with shared, it is everyone's
            again = _ok(await alice.call_tool("patch_submit", {**submit, "shared": True}))
            assert again["patch_id"] == pid and again["cached"]
            assert pid in await _index(bob)
            seen = json.loads((await bob.read_resource(f"labwarden://patches/{pid}")).contents[0].text)  # type: ignore[union-attr]
            assert seen["shared"] and seen["author"] is None and seen["principal"] is None
            assert _ok(await bob.call_tool("build", {"patches": [pid]}))["git_hash"] == commit
            _ok(await bob.call_tool("source_read", {"path": "hal.c", "ref": commit}))
    finally:
        stop(proc)
