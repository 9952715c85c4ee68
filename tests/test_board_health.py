"""Board health on the vlab: a failed flash makes the board unknown, only a health check may run
then; it passing makes the board good, it failing makes it bad, which only a person clears."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.lab.boardstate import BoardState
from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.vlab.layout import VlabLayout

from .tooling import baseline

pytestmark = pytest.mark.anyio




def _corrupt(image: Path) -> Path:
    saved = image.with_suffix(".good")
    shutil.copy2(image, saved)
    image.write_bytes(b"this is not a firmware image\n")
    return saved


async def test_health_lifecycle(lab: VlabLayout) -> None:
    data = tomllib.loads(lab.lab_toml.read_text())
    data["flash"]["timeout_s"] = 10
    profile = LabProfile.from_dict(data, lab.lab_toml)
    base = baseline(lab)
    async with open_lab(profile, client="test") as ctx:
        assert (await call_tool(ctx, "fingerprint_verify", {"build_id": base})).ok
        built = await call_tool(ctx, "build", {"patches": ["0905"]})
        assert built.ok and built.result
        bad_image = Path(built.result["image"])
        _corrupt(bad_image)

        rec = await call_tool(ctx, "flash", {"build_id": built.result["build_id"]})
        assert not rec.ok and rec.error is not None and rec.error.kind == "device"
        assert ctx.state.board_health == "unknown"

        refused = await call_tool(ctx, "associate", {"stations": 6})
        assert refused.error is not None and refused.error.code == "board_unknown"
        assert base in (refused.error.remedy or "")
        again = await call_tool(ctx, "flash", {"build_id": built.result["build_id"]})
        assert again.error is not None and again.error.code == "board_unknown", "not a known image"

        # the health check: flash the known image, then verify it
        assert (await call_tool(ctx, "flash", {"build_id": base})).ok
        assert ctx.state.board_health == "unknown", "flashed is not yet verified"
        verified = await call_tool(ctx, "fingerprint_verify", {"build_id": base})
        assert verified.ok and verified.result and verified.result["verified"]
        assert ctx.state.board_health == "good"
        assert (await call_tool(ctx, "associate", {"stations": 0})).ok

        # a failed health check makes the board bad
        assert not (await call_tool(ctx, "flash", {"build_id": built.result["build_id"]})).ok
        good_base = _corrupt(Path(LabProfile.from_file(lab.lab_toml).build.builds) / base / "image.tar.gz")
        try:
            failed = await call_tool(ctx, "flash", {"build_id": base})
        finally:
            shutil.copy2(good_base, good_base.with_suffix(".tar.gz"))
        assert not failed.ok
        assert ctx.state.board_health == "bad"
        for tool, args in (("flash", {"build_id": base}), ("associate", {"stations": 6}),
                           ("fingerprint_verify", {"build_id": base})):
            rec = await call_tool(ctx, tool, args)
            assert rec.error is not None and rec.error.code == "board_bad", tool
        assert (await call_tool(ctx, "lab_status", {})).ok, "status is always allowed"

    runner = CliRunner()
    res = runner.invoke(app, ["lab", "clear-bad", "--lab", str(lab.lab_toml), "--reason", "reseated"])
    assert res.exit_code == 0 and "unknown" in res.stdout
    state = BoardState.load(lab.data_dir)
    assert state.board_health == "unknown" and "reseated" in (state.health_reason or "")
    assert runner.invoke(app, ["lab", "clear-bad", "--lab", str(lab.lab_toml)]).exit_code == 1
