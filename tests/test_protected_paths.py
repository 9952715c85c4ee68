"""Protected means protected: the files a patch changes are what git changes when it applies it,
and a patch that changes the monitor's code by any route is refused -- each spelling beside an
ordinary hunk on hal.c, through the MCP door (the SDK's client, in memory) and the CLI door
(`labwarden call`, typer's runner): a GIT binary patch, x/ y/ prefixes, quoted names, a
mode-only change, a rename, a type change to a symlink, and a Makefile rule building the monitor
from a new file (stamon.c untouched). An experiment on a patch that reaches the monitor without
patch_submit (a .patch file dropped in the lab's patch directory) is dropped before B is
flashed. Real vlab, git, make, gcc; nothing faked."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from mcp import Client
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.lab.config import LabProfile
from labwarden.lab.host import patchstore
from labwarden.lab.host.builder import git
from labwarden.server.app import build_server
from labwarden.vlab.layout import VlabLayout

from .diffing import both, git_diff, replace, symlink
from .patching import BULK, SLOW_MONITOR
from .tooling import call

pytestmark = pytest.mark.anyio
runner = CliRunner()
HAL = replace("hal.c", *BULK)
"""The ordinary hunk every spelling rides beside."""


def _quoted(diff: str) -> str:
    return (diff.replace("diff --git a/stamon.c b/stamon.c", 'diff --git "a/stamon.c" "b/stamon.c"')
            .replace("--- a/stamon.c", '--- "a/stamon.c"').replace("+++ b/stamon.c", '+++ "b/stamon.c"'))


def _binary(tree: Path) -> None:
    (tree / ".git" / "info" / "attributes").write_text("stamon.c binary\n")  # not in the diff


def _chmod(tree: Path) -> None:
    os.chmod(tree / "stamon.c", 0o755)


def _rename(tree: Path) -> None:
    (tree / "stamon.c").rename(tree / "monitor.c")


def _to_symlink(tree: Path) -> None:
    body = (tree / "stamon.c").read_text()
    (tree / "stamon.c").unlink()
    (tree / "mon_impl.c").write_text(body.replace(*SLOW_MONITOR))


def _new_source_rule(tree: Path) -> None:
    body = (tree / "stamon.c").read_text().replace(*SLOW_MONITOR)
    (tree / "mon2.c").write_text(body)
    make = (tree / "Makefile").read_text()
    rule = "$(O)/stamon: $(O)/mon2.o $(O)/libsta.so\n\t$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -L$(O) -lsta\n\n"
    (tree / "Makefile").write_text(make.replace("$(O)/%: $(O)/%.o $(O)/libsta.so\n",
                                                rule + "$(O)/%: $(O)/%.o $(O)/libsta.so\n", 1))


SLOW = replace("stamon.c", *SLOW_MONITOR)
SPELLINGS: dict[str, tuple[Callable[[Path], None], tuple[str, ...], Callable[[str], str]]] = {
    # name: (edit, git diff flags, rewrite of the diff text)
    "binary": (both(_binary, SLOW, HAL), ("--binary",), lambda d: d),
    "prefixes": (both(SLOW, HAL), ("--src-prefix=x/", "--dst-prefix=y/"), lambda d: d),
    "no-prefix": (both(SLOW, HAL), ("--no-prefix",), lambda d: d),
    "quoted": (both(SLOW, HAL), (), _quoted),
    "mode-only": (both(_chmod, HAL), (), lambda d: d),
    "rename": (both(_rename, HAL), ("-M",), lambda d: d),
    "symlink": (both(_to_symlink, symlink("stamon.c", "mon_impl.c"), HAL), (), lambda d: d),
    "build-rule": (both(_new_source_rule, HAL), (), lambda d: d),
}


def _diff(vlab: VlabLayout, spelling: str) -> str:
    edit, flags, rewrite = SPELLINGS[spelling]
    return rewrite(git_diff(vlab.src, edit, *flags))


async def _mcp(vlab: VlabLayout, args: dict[str, object]) -> dict[str, object]:
    async with Client(build_server(LabProfile.from_file(vlab.lab_toml))) as client:
        res = await client.call_tool("patch_submit", args)
    assert res.is_error, res.structured_content
    return json.loads(res.content[0].text)  # type: ignore[union-attr]


def _cli(lab: Path, args: dict[str, object]) -> dict[str, object]:
    res = runner.invoke(app, ["call", "patch_submit", json.dumps(args), "--lab", str(lab), "--json"])
    assert res.exit_code == 1, res.output
    return json.loads(res.stdout)["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("door", ["mcp", "cli"])
@pytest.mark.parametrize("spelling", list(SPELLINGS))
async def test_every_spelling_of_a_monitor_change_is_refused(vlab: VlabLayout, door: str,
                                                             spelling: str) -> None:
    diff = _diff(vlab, spelling)
    args: dict[str, object] = {"name": f"sneak-{spelling}", "diff": diff}
    err = await _mcp(vlab, args) if door == "mcp" else \
        await anyio.to_thread.run_sync(_cli, vlab.lab_toml, args)
    text = json.dumps(err)
    if spelling == "no-prefix":  # git applies with -p1, as the build does: it names no file here
        assert err["kind"] == "build" and "does not apply" in text, err
    else:
        assert err["code"] == "protected_path", err
        assert "stamon" in text and "protected" in text
    assert not list((vlab.data_dir / "patches").glob("sneak-*.json"))


def test_the_changed_set_is_what_git_applies(vlab: VlabLayout) -> None:
    """Each spelling's changed set, computed by applying it: the protected file is in it, hal.c
    too; the build-rule spelling leaves stamon.c out (the fingerprint check catches it)."""
    base = git(vlab.src, "rev-parse", "HEAD")
    for spelling in SPELLINGS.keys() - {"no-prefix"}:
        files = patchstore.changed_paths(vlab.src, base, [], _diff(vlab, spelling).encode())
        assert "hal.c" in files, (spelling, files)
        assert ("stamon.c" in files) == (spelling != "build-rule"), (spelling, files)
    assert patchstore.changed_paths(vlab.src, base, [], _diff(vlab, "rename").encode()) == \
        ["hal.c", "monitor.c", "stamon.c"]


async def test_an_ordinary_patch_still_passes(vlab: VlabLayout) -> None:
    diff = git_diff(vlab.src, HAL, "--src-prefix=x/", "--dst-prefix=y/")
    rec = await call(vlab, "patch_submit", {"name": "bulk-any-prefix", "diff": diff})
    assert rec.ok, rec.error
    assert rec.result and rec.result["files"] == ["hal.c"]


async def test_an_experiment_on_a_monitor_change_is_never_kept(lab: VlabLayout) -> None:
    """A patch that never went through patch_submit (dropped into the lab's patch directory):
    the experiment builds A and B, finds the monitor's code differs, and drops it before B is
    flashed or measured."""
    diff = git_diff(lab.src, both(_new_source_rule, HAL))
    (lab.root / "patches").mkdir(exist_ok=True)
    (lab.root / "patches" / "7001-sneaky-monitor.patch").write_text(diff)
    rec = await call(lab, "experiment", {"patch": "7001"})
    assert rec.ok, rec.error
    assert rec.result and rec.result["decision"] == "dropped", rec.result
    assert "stamon" in rec.result["reason"] and "protected" in rec.result["reason"]
    assert rec.result["verdict"] is None and rec.result["stations"] is None  # B never measured
