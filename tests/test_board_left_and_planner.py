"""A new user's first hour, on one vlab (issue [4/4], deliverables 4, 5 and paths of 6):

- where `experiment` leaves the board: on A (the base) after a B that regressed, on B after a
  kept one -- the result names it, and fingerprint_verify / the board state agree;
- where `bisect` leaves it: on good's build (the base), as its result says;
- a patch id depends on its base: the same diff on two bases is two patches, and an id of the
  old form (the diff alone) still resolves;
- the loop without a key: `labwarden loop --planner patches --patches DIR` judges a directory of
  patches (one that does not compile: rejected at submission, not judged; then the vlab's 0901:
  kept) through the same loop, ledger and report, with no API key and no stand-in of the
  Messages API;
- `transcripts list` without --db finds the profile's transcript database.

Real parts throughout (builds, flashes, windows, the guard, the transcript); 2 s windows at 30
and 60 clients keep each experiment short, as tests/test_loop_vlab.py does.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.events import ModelCall, ToolCalled
from labwarden.core.experiments import Bisection, Experiment
from labwarden.core.records import RecordStore
from labwarden.lab.boardstate import BoardStateFile
from labwarden.lab.config import LabProfile
from labwarden.lab.host import patchstore
from labwarden.lab.host.builder import git
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.tools.context import LabContext
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab import firmware
from labwarden.vlab.layout import VlabLayout

from .fleet_fixtures import with_decision
from .patching import BROKEN, NO_OP, change

runner = CliRunner()
QUICK = {"window_s": "2.0", "densities": "[30, 60]", "sweep_reps": "2", "max_windows": "9",
         "min_effect_pct": "10.0"}
"""tests/test_loop_vlab.py's [decision]: 2 s windows, 30/60 clients, a no-op decided within 9."""


@pytest.fixture(scope="module")
def quick(lab: VlabLayout) -> Path:
    return with_decision(lab.lab_toml, QUICK)


async def _ok(ctx: LabContext, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    rec = await call_tool(ctx, tool, args)
    assert rec.ok and rec.result is not None, (tool, rec.error)
    return rec.result


TWICE = ("\t\twld_ad_buildStaticParams(ad, &t);\n\t\tdm_finalize_transaction(&t);\n",
         "\t\twld_ad_buildStaticParams(ad, &t);\n\t\tdm_finalize_transaction(&t);\n"
         "\t\tdm_trans_init(&t, ad->obj);\n"
         "\t\twld_ad_buildStaticParams(ad, &t);\n\t\tdm_finalize_transaction(&t);\n")
"""wld.c: every station's static block rebuilt and written twice a poll -- B regresses."""


@pytest.mark.anyio
async def test_a_regressed_b_leaves_a_running(quick: Path) -> None:
    prof = LabProfile.from_file(quick)
    async with open_lab(prof, client="test") as ctx:
        sub = await _ok(ctx, "patch_submit", {"name": "write-twice", "diff": change("wld.c", *TWICE)})
        out = await _ok(ctx, "experiment", {"patch": sub["patch_id"]})
        assert out["verdict"] == "regressed" and out["decision"] == "dropped", out
        assert out["left_flashed"] == out["build_a"] != out["build_b"], out
        assert "A (the base" in out["left_flashed_why"], out["left_flashed_why"]
        state = ctx.peek_state()
        assert state.verified_build == state.flashed_build == out["build_a"]
        status = await _ok(ctx, "lab_status", {})
        assert status["flashed_build"] == out["build_a"] and status["fingerprint_verified"]
        fp = await _ok(ctx, "fingerprint_verify", {"build_id": out["build_a"]})
        assert fp["verified"], fp
    stored = RecordStore(prof.data_dir()).load("exp", out["experiment_id"], Experiment)
    assert stored.left_flashed == out["build_a"] and stored.left_why


@pytest.mark.anyio
async def test_a_patch_id_depends_on_its_base(quick: Path) -> None:
    prof = LabProfile.from_file(quick)
    diff = change("wld.c", *NO_OP)
    async with open_lab(prof, client="test") as ctx:
        on_head = await _ok(ctx, "patch_submit", {"name": "comment", "diff": diff})
        on_0902 = await _ok(ctx, "patch_submit", {"name": "comment", "diff": diff,
                                                  "base_patches": ["0902"]})
        again = await _ok(ctx, "patch_submit", {"name": "comment", "diff": diff})
        assert on_head["patch_id"] != on_0902["patch_id"]
        assert again["patch_id"] == on_head["patch_id"] and again["cached"]
        assert on_head["build_id"] != on_0902["build_id"]
        # a patch stored before the base counted: its id hashes the diff alone, and resolves
        store = patchstore.lab_patches(prof.data_dir())
        old_id = patchstore.patch_id("comment", diff)[0]
        assert old_id not in (on_head["patch_id"], on_0902["patch_id"])
        shutil.copyfile(store.path(on_head["patch_id"]), store.path(old_id))
        meta = json.loads((store.root / f"{on_head['patch_id']}.json").read_text())
        (store.root / f"{old_id}.json").write_text(json.dumps({**meta, "id": old_id}))
        loaded = store.meta(old_id)
        assert loaded is not None and loaded.id == old_id
        built = await _ok(ctx, "build", {"patches": [old_id]})
        assert built["build_id"]


def test_the_patch_planner_runs_the_loop_without_a_key(quick: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    patches = tmp_path / "candidates"
    patches.mkdir()
    # a patch that does not compile first: refused by patch_submit, not judged, the loop goes on
    # (a regressed B left on A: test_a_regressed_b_leaves_a_running above)
    (patches / "a-missing-semicolon.diff").write_text(change("wld.c", *BROKEN))
    shutil.copyfile(next(firmware.patches_package_dir().glob("0901-*.patch")),
                    patches / "b-0901-gate.patch")  # then a fix: kept, left on B
    (patches / "README.txt").write_text("not a patch")
    out = tmp_path / "night"
    res = runner.invoke(app, ["loop", "--skip-calibration", "--lab", str(quick), "--planner", "patches",
                              "--patches", str(patches), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "stopped: done" in res.output, res.output

    prof = LabProfile.from_file(quick)
    with TranscriptStore(prof.data_dir() / "transcripts.db") as store:
        sid = next(s.id for s in store.sessions() if s.client == "loop")
        events = [e.event for e in store.events(sid)]
    top = [e.call for e in events if isinstance(e, ToolCalled) and e.parent_id is None]
    assert [c.tool for c in top] == ["patch_submit", "patch_submit", "experiment"]
    assert not [e for e in events if isinstance(e, ModelCall)]  # nothing priced: no model
    broken, _, judged = top
    assert not broken.ok and broken.args["name"] == "a-missing-semicolon", broken
    fix = judged.result
    assert fix and fix["patch"].startswith("b-0901-gate-")
    assert fix["decision"] == "kept" and fix["verdict"] == "improved", fix
    assert fix["left_flashed"] == fix["build_b"] and "B (kept)" in fix["left_flashed_why"]
    board = BoardStateFile(prof.data_dir()).peek()
    assert board.verified_build == board.flashed_build == fix["build_b"]  # the kept stack runs

    summary = (out / "summary.md").read_text()
    assert fix["patch"] in summary.split("## Kept")[1].split("## ")[0]
    assert "**Candidates judged:** 1" in summary and "0 failed" in summary, summary
    assert "1 rejected at submission" in summary and "a-missing-semicolon" in summary, summary
    report = (out / "report.html").read_text()
    ledger = report.split('id="ledger-table"')[1].split("</table>")[0]
    assert ledger.count('class="exp-row"') == 1
    assert fix["patch"] in ledger and f'data-decision="{fix["decision"]}"' in ledger

    # the profile's own transcript database, found without --db (its data dir, not the cwd)
    listed = runner.invoke(app, ["transcripts", "list", "--lab", str(quick)], env={"COLUMNS": "200"})
    assert listed.exit_code == 0 and sid in listed.output, listed.output
    by_env = runner.invoke(app, ["transcripts", "replay", sid],
                           env={"LABWARDEN_LAB": str(quick), "COLUMNS": "200"})
    assert by_env.exit_code == 0 and "experiment" in by_env.output, by_env.output
    db = str(prof.data_dir() / "transcripts.db")
    assert runner.invoke(app, ["transcripts", "list"],
                         env={"LABWARDEN_TRANSCRIPTS": db, "COLUMNS": "200"}).exit_code == 0
    missing = tmp_path / "nowhere" / "lab.toml"
    none = runner.invoke(app, ["transcripts", "list", "--lab", str(missing)])
    assert none.exit_code == 2 and "no lab profile at" in none.output, none.output
    assert str(missing) in none.output.replace("\n", "")


def test_the_planner_refuses_what_it_cannot_run(quick: Path, tmp_path: Path) -> None:
    empty = runner.invoke(app, ["loop", "--skip-calibration", "--lab", str(quick), "--planner", "patches",
                                "--patches", str(tmp_path)])
    assert empty.exit_code == 2 and "no *.patch or *.diff file" in empty.output, empty.output
    bare = runner.invoke(app, ["loop", "--skip-calibration", "--lab", str(quick), "--planner", "patches"])
    assert bare.exit_code == 2 and "--patches DIR" in bare.output, bare.output


@pytest.mark.anyio
async def test_bisect_leaves_the_board_on_good(lab: VlabLayout) -> None:
    """Between the regressing commit and HEAD nothing changes stad's code: the ends compare (no
    regression, or undecided at the cap), and the board is left on good's build either way. The
    cap is the rule's first look (3 windows an arm): where the board is left does not depend on
    the verdict, and the ends of a no-op went on to the cap of 9 in a loaded run (64 s)."""
    good = git(lab.src, "log", "--format=%H", "--grep", "^wld: sync", "HEAD")
    assert good and git(lab.src, "log", "-1", "--format=%s", good) == firmware.REGRESSION
    prof = LabProfile.from_file(with_decision(lab.lab_toml, {**QUICK, "max_windows": "3"},
                                              "lab-bisect-first-look.toml"))
    async with open_lab(prof, client="test") as ctx:
        out = await _ok(ctx, "bisect", {"good": good, "bad": "HEAD"})
        built = await _ok(ctx, "build", {"ref": good})
        state = ctx.peek_state()
    assert out["outcome"] in ("no_regression", "undecided"), out
    assert out["left_flashed"] == built["build_id"], out
    assert "good (" in out["left_flashed_why"] and "the base" in out["left_flashed_why"]
    assert state.verified_build == state.flashed_build == built["build_id"]
    stored = RecordStore(prof.data_dir()).load("bis", out["bisect_id"], Bisection)
    assert stored.left_flashed == built["build_id"]
