"""bisect on the vlab's firmware history: between its first commit and HEAD, one commit brings back
the per-sample static write-back; bisect must name it, each step judged by the decision rule with
real builds, flashes and windows (through the runner: guard, heals after each flash, transcript).
Short windows and one density keep it near a minute on 2 cores."""

from __future__ import annotations

import re

import pytest

from labwarden.core.experiments import Bisection
from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.lab.host.builder import git
from labwarden.vlab import firmware
from labwarden.vlab.layout import VlabLayout

from .tooling import call

pytestmark = pytest.mark.anyio


def quick(layout: VlabLayout) -> LabProfile:
    text = layout.lab_toml.read_text()
    for key, value in (("window_s", "2.0"), ("densities", "[60]"), ("max_windows", "7")):
        text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, count=1, flags=re.M)
    path = layout.lab_toml.with_name("lab-quick.toml")
    path.write_text(text)
    return LabProfile.from_file(path)


@pytest.mark.long  # ~70 s: make test-long; make test bisects logfilt's history (test_loop_logfilt)
async def test_bisect_names_the_regressing_commit(lab: VlabLayout) -> None:
    first = git(lab.src, "rev-list", "--max-parents=0", "HEAD")
    rec = await call(lab, "bisect", {"good": first, "bad": "HEAD"}, profile=quick(lab))
    assert rec.ok, rec.error
    out = rec.result
    assert out is not None
    assert out["outcome"] == "found", out
    assert out["first_bad_subject"] == firmware.REGRESSION
    assert out["first_bad"] == git(lab.src, "log", "--format=%H", "--grep", "^wld: sync", "HEAD")
    assert out["commits"] == len(firmware.HISTORY) - 1
    assert out["regression"].startswith("regressed")
    stored = RecordStore(lab.data_dir).load("bis", out["bisect_id"], Bisection)
    assert stored.ends is not None and stored.ends.delta_pct > 10  # 0901's code is ~1/3 cheaper
    tested = [s.commit for s in stored.steps]
    assert stored.first_bad in tested and len(set(tested)) <= 3  # log2 of 4 candidates, plus ends
    assert all(s.side != "unknown" for s in stored.steps)
    bad_step = next(s for s in stored.steps if s.commit == stored.first_bad)
    assert bad_step.judgement.verdict == "regressed" and bad_step.side == "bad"
    # the board is left on good's build (the base), not on the regressing commit it found
    built = await call(lab, "build", {"ref": first}, profile=quick(lab))
    assert built.ok and built.result is not None
    assert out["left_flashed"] == stored.left_flashed == built.result["build_id"], out
    assert "good (" in out["left_flashed_why"]


async def test_bisect_refuses_refs_that_are_not_in_order(lab: VlabLayout) -> None:
    first = git(lab.src, "rev-list", "--max-parents=0", "HEAD")
    rec = await call(lab, "bisect", {"good": "HEAD", "bad": first}, profile=quick(lab))
    assert rec.error and rec.error.kind == "invalid_input" and "not an ancestor" in rec.error.message
    bad_metric = await call(lab, "bisect", {"good": first, "bad": "HEAD", "metric": "joules"},
                            profile=quick(lab))
    assert bad_metric.error and "metric" in bad_metric.error.message
