"""The CLI through typer's runner, in-process: exit codes, messages, and remedies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labwarden.cli.app import app

runner = CliRunner()


def test_doctor_json_lists_every_check_with_remedies() -> None:
    res = runner.invoke(app, ["doctor", "--json"])
    assert res.exit_code in (0, 2), res.output
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    assert {"perf", "perf_event_paranoid", "tracefs", "uprobes", "inferno-collapse-perf",
            "cargo", "gcc"} <= set(checks)
    assert all(c["ok"] or c["remedy"] for c in checks.values())
    assert res.exit_code == (0 if all(c["ok"] for c in checks.values()) else 2)


def test_doctor_names_the_remedy_when_tools_are_missing(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("labwarden.lab.host.binaries.project_tools_bin", lambda: tmp_path)
    res = runner.invoke(app, ["doctor", "--json"])
    assert res.exit_code == 2
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    assert not checks["perf"]["ok"] and "linux-perf" in checks["perf"]["remedy"]
    assert not checks["gcc"]["ok"] and "apt-get install gcc" in checks["gcc"]["remedy"]
    assert "make setup" in checks["inferno-collapse-perf"]["remedy"]


def test_status_of_a_down_vlab_says_how_to_start_it(tmp_path: Path) -> None:
    res = runner.invoke(app, ["vlab", "status", "--dir", str(tmp_path)])
    assert res.exit_code == 1
    assert "down" in res.stdout and "vlab up" in res.stdout


def test_associate_without_a_vlab_gives_the_remedy(tmp_path: Path) -> None:
    res = runner.invoke(app, ["vlab", "associate", "18", "--dir", str(tmp_path)])
    assert res.exit_code == 1
    assert "not answering" in res.output and "remedy" in res.output


def test_curve_rejects_bad_densities(tmp_path: Path) -> None:
    res = runner.invoke(app, ["vlab", "curve", "--dir", str(tmp_path), "--densities", "18,lots"])
    assert res.exit_code == 2
    assert "--densities" in res.output


def test_vlab_cli_roundtrip(tmp_path: Path) -> None:
    root = str(tmp_path / "v")
    try:
        res = runner.invoke(app, ["vlab", "up", "--dir", root])
        assert res.exit_code == 0, res.output
        assert "lab profile" in res.stdout
        res = runner.invoke(app, ["vlab", "associate", "18", "--dir", root])
        assert res.exit_code == 0 and "total=18" in res.stdout
        res = runner.invoke(app, ["vlab", "status", "--dir", root, "--json"])
        st = json.loads(res.stdout)
        assert st["up"] and st["associated"]["total"] == 18
    finally:
        res = runner.invoke(app, ["vlab", "down", "--dir", root])
    assert res.exit_code == 0 and "stopped" in res.stdout
