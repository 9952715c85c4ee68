"""Reading the firmware and submitting patches: the source tree at a ref (ripgrep and the Python
fallback agree), path containment, diff parsing, protected paths -- and, through the runner on a
real vlab (guard, transcript, git, gcc), source_search, source_read, patch_submit and `build` of a
submitted id, the patches resource, and the vlab's firmware history. Nothing is faked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from mcp import Client

from labwarden.lab.config import LabProfile
from labwarden.lab.host import patchstore, sourcetree
from labwarden.lab.host.builder import git
from labwarden.server.app import build_server
from labwarden.vlab import firmware
from labwarden.vlab.layout import VlabLayout

from .patching import BROKEN, BULK, SLOW_MONITOR, change
from .tooling import call, ok

pytestmark = pytest.mark.anyio


# -- no lab: the repo, the tree, the diff --------------------------------------------------

@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    layout = VlabLayout.at(tmp_path_factory.mktemp("fw"))
    firmware.init_repo(layout)
    return layout.src


def test_the_vlab_repo_has_a_history_with_one_regression_and_head_unchanged(repo: Path) -> None:
    subjects = git(repo, "log", "--reverse", "--format=%s").splitlines()
    assert subjects == [s for s, _ in firmware.HISTORY]
    assert subjects.index(firmware.REGRESSION) == 2
    first = git(repo, "rev-list", "--max-parents=0", "HEAD")
    old_wld = git(repo, "show", f"{first}:wld.c")
    assert "if (!ad->first_sync_done || ad->assoc_state != ad->synced_assoc_state)" in old_wld
    # HEAD is the packaged tree, byte for byte: the demo and its calibration do not move
    head = subprocess.run(["git", "-C", str(repo), "diff", "--stat", "HEAD", "--"], capture_output=True,
                          text=True).stdout
    assert head == ""
    for f in firmware.firmware_package_dir().rglob("*"):
        if f.is_file() and "__pycache__" not in f.parts:
            rel = f.relative_to(firmware.firmware_package_dir()).as_posix()
            assert git(repo, "show", f"HEAD:{rel}") == f.read_text().rstrip("\n"), rel


def _grep(pattern: str, glob: str) -> list[tuple[str, int]]:
    """(path, line) of every match in the shipped firmware, as the repo's HEAD holds it: the
    expectation is computed, so a firmware change does not break the search tests."""
    root = firmware.firmware_package_dir()
    rx = re.compile(pattern)
    return [(f.relative_to(root).as_posix(), n)
            for f in sorted(root.rglob(glob)) if f.is_file() and "__pycache__" not in f.parts
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1) if rx.search(line)]

def test_ripgrep_and_the_python_fallback_find_the_same_hits(repo: Path, tmp_path: Path) -> None:
    commit, root = sourcetree.tree_at(repo, "HEAD", tmp_path / "src")
    assert commit == git(repo, "rev-parse", "HEAD") and (root / "hal.c").is_file()
    py, engine = sourcetree.search(root, r"hal_get_all_stations_bulk\(", None, 1, engine="python")
    assert engine == "python"
    assert [(h.path, h.line) for h in py] == _grep(r"hal_get_all_stations_bulk\(", "*")
    assert {"hal.c", "sta.h", "wld.c"} <= {h.path for h in py}
    assert py[0].before and py[0].after  # context lines
    if shutil.which("rg") is None:
        if os.environ.get("CI") == "true":  # scripts/setup-system.sh installs it
            pytest.fail("ripgrep is not installed: run scripts/setup-system.sh as root")
        pytest.skip("ripgrep is not installed: only the fallback ran")
    rg, engine = sourcetree.search(root, r"hal_get_all_stations_bulk\(", None, 1)
    assert engine == "ripgrep" and rg == py
    only_c = sourcetree.search(root, "bulk", "*.c", 0)[0]
    assert only_c and all(h.path.endswith(".c") for h in only_c)
    assert only_c == sourcetree.search(root, "bulk", "*.c", 0, engine="python")[0]


def test_paths_stay_inside_the_tree(repo: Path, tmp_path: Path) -> None:
    # a commit with a symlink out of the repo: the tree leaves it out, reads refuse it
    work = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(work)], check=True)
    os.symlink("/etc", work / "escape")
    os.symlink("hal.c", work / "hal-link.c")  # inside: fine
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "links")
    _, root = sourcetree.tree_at(work, "HEAD", tmp_path / "src")
    assert not (root / "escape").exists() and (root / "hal-link.c").is_file()
    os.symlink("/etc", root / "planted")  # even one planted afterwards is refused
    for bad in ("../hal.c", "/etc/passwd", "planted/passwd", "a/../../x"):
        with pytest.raises(sourcetree.SourceError, match="path:"):
            sourcetree.inside(root, bad)
    lines, total = sourcetree.read_lines(root, "hal-link.c", 1, 3)
    assert total > 100 and len(lines) == 3
    with pytest.raises(sourcetree.SourceError, match="no file 'hal'"):
        sourcetree.read_lines(root, "hal", 1, 3)
    with pytest.raises(sourcetree.SourceError, match="ref"):
        sourcetree.tree_at(work, "-rf", tmp_path / "src")


def test_diff_paths_are_parsed_and_checked() -> None:
    diff = change("hal.c", *BULK)
    assert patchstore.diff_paths(diff) == ["hal.c"]
    git_style = ("diff --git a/new.c b/new.c\nnew file mode 100644\n--- /dev/null\n+++ b/new.c\n"
                 "@@ -0,0 +1 @@\n+int x;\n")
    assert patchstore.diff_paths(git_style) == ["new.c"]
    rename = ("diff --git a/a.c b/b.c\nrename from a.c\nrename to b.c\n--- a/a.c\n+++ b/b.c\n"
              "@@ -1 +1 @@\n-x\n+y\n")
    assert patchstore.diff_paths(rename) == ["a.c", "b.c"]
    for bad in ("--- a/../etc/x\n+++ b/../etc/x\n@@ -1 +1 @@\n-a\n+b\n",
                "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n"):
        with pytest.raises(patchstore.PatchError, match="absolute or climbs"):
            patchstore.diff_paths(bad)
    with pytest.raises(patchstore.PatchError, match="not a unified diff"):
        patchstore.diff_paths("please make it faster")
    globs = ["stamon.c", "stasim.c", "tools/*"]
    assert patchstore.protected(["wld.c", "stamon.c", "sub/stasim.c", "tools/x.sh"], globs) == \
        ["stamon.c", "sub/stasim.c", "tools/x.sh"]
    with pytest.raises(patchstore.PatchError, match="name"):
        patchstore.patch_id("Bulk Pull", diff)
    assert patchstore.patch_id("bulk", diff)[0] == patchstore.patch_id("bulk", diff.rstrip("\n"))[0]


# -- through the runner, on a vlab ----------------------------------------------------------

async def test_source_search_and_read_through_the_door(vlab: VlabLayout) -> None:
    found = await ok(vlab, "source_search", {"pattern": "hal_get_all_stations_bulk", "limit": 2})
    want = _grep("hal_get_all_stations_bulk", "*")  # the firmware as shipped is the repo's HEAD
    assert found["total"] == len(want) >= 5 and found["files"] == len({p for p, _ in want})
    assert len(found["hits"]) == 2 and found["next_offset"] == 2
    rest = await ok(vlab, "source_search", {"pattern": "hal_get_all_stations_bulk", "offset": 2,
                                             "limit": 50})
    assert [(h["path"], h["line"]) for h in found["hits"] + rest["hits"]] == want
    assert rest["next_offset"] is None
    only = await ok(vlab, "source_search", {"pattern": "hal_get_all_stations_bulk",
                                             "path_glob": "*.c"})
    assert {h["path"] for h in only["hits"]} == {p for p, _ in _grep("hal_get_all_stations_bulk", "*.c")}
    at = _grep(r"^int hal_has_bulk_capability\(int vap\)", "hal.c")[0][1]
    read = await ok(vlab, "source_read", {"path": "hal.c", "start": at, "end": at + 4})
    assert read["lines"][0] == f"{at:>4}| int hal_has_bulk_capability(int vap)"
    assert read["lines"][-2].endswith("return 0;") and read["next_start"] == at + 5
    first = git(vlab.src, "rev-list", "--max-parents=0", "HEAD")
    old = await ok(vlab, "source_search", {"pattern": r"first_sync_done \|\|", "ref": first})
    assert [h["path"] for h in old["hits"]] == ["wld.c"]  # the history is readable by ref
    out = await call(vlab, "source_read", {"path": "../lab.toml"})
    assert not out.ok and out.error and out.error.kind == "invalid_input"
    assert "path:" in out.error.message and out.error.remedy
    bad_ref = await call(vlab, "source_read", {"path": "hal.c", "ref": "nosuchbranch"})
    assert bad_ref.error and "ref: no commit 'nosuchbranch'" in bad_ref.error.message


async def test_patch_submit_refuses_protected_paths_and_returns_compiler_lines(vlab: VlabLayout) -> None:
    slower_monitor = change("stamon.c", *SLOW_MONITOR)
    out = await call(vlab, "patch_submit", {"name": "slow-monitor", "diff": slower_monitor})
    assert out.error and out.error.kind == "refused" and out.error.code == "protected_path"
    assert "stamon.c" in out.error.message and out.error.lines == ["stamon.c"]

    broken = change("wld.c", *BROKEN)
    out = await call(vlab, "patch_submit", {"name": "broken", "diff": broken})
    assert out.error and out.error.kind == "build" and out.error.message == "compile failed"
    assert any("wld.c" in ln and "error" in ln for ln in out.error.lines), out.error.lines

    stale = change("hal.c", *BULK).replace(" int hal_has_bulk_capability(int vap)",
                                           " int hal_has_bulk_capability(int radio)")
    out = await call(vlab, "patch_submit", {"name": "stale", "diff": stale})
    assert out.error and out.error.kind == "build" and out.error.message.startswith("patch ")
    assert any("hal.c" in ln for ln in out.error.lines)
    assert not list((vlab.data_dir / "patches").glob("*.json"))  # nothing stored from these


async def test_a_submitted_patch_is_stored_built_and_listed(vlab: VlabLayout) -> None:
    diff = change("hal.c", *BULK)
    res = await ok(vlab, "patch_submit", {"name": "bulk-pull", "diff": diff, "base_patches": ["0901"],
                                          "summary": "pull the stations in one dump"})
    pid = res["patch_id"]
    assert pid.startswith("bulk-pull-") and res["files"] == ["hal.c"] and not res["cached"]
    assert res["author"] and res["base_patches"] == ["0901"]
    again = await ok(vlab, "patch_submit", {"name": "bulk-pull", "diff": diff, "base_patches": ["0901"]})
    assert again["cached"] and again["patch_id"] == pid
    built = await ok(vlab, "build", {"patches": ["0901", pid]})  # usable like a shipped patch
    assert built["build_id"] == res["build_id"] and built["cached"]
    meta = json.loads((vlab.data_dir / "patches" / f"{pid}.json").read_text())
    assert meta["author"] == res["author"] and meta["summary"] == "pull the stations in one dump"
    async with Client(build_server(LabProfile.from_file(vlab.lab_toml))) as client:
        index = json.loads((await client.read_resource("labwarden://patches/index")).contents[0].text)  # type: ignore[union-attr]
        one = json.loads((await client.read_resource(f"labwarden://patches/{pid}")).contents[0].text)  # type: ignore[union-attr]
        listed = {r.uri for r in (await client.list_resources()).resources}
    assert [m["id"] for m in index] == [pid] and one["diff"] == diff
    assert "labwarden://patches/index" in listed


async def test_an_experiment_on_an_unknown_patch_is_refused_before_anything_runs(vlab: VlabLayout) -> None:
    out = await call(vlab, "experiment", {"patch": "no-such-patch"})
    assert out.error and out.error.kind == "invalid_input" and "no-such-patch" in out.error.message
    assert "patch_submit" in (out.error.remedy or "")
    assert not list((vlab.data_dir / "records").glob("exp/*.json"))  # no experiment recorded
