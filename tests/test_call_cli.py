"""`labwarden call` and `labwarden report` through typer's runner, in-process, against the vlab:
results, exit codes, a tool registered after import, and the clear errors of a bad profile, an
unreachable DUT, a wrong host key, an unknown patch, an unknown session."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import asyncssh
import pytest
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from labwarden.cli.app import app
from labwarden.core.events import ToolCalled
from labwarden.core.spec import ToolSpec
from labwarden.tools import registry
from labwarden.tools.context import LabContext
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab.layout import VlabLayout

runner = CliRunner()


def _call(lab: Path, tool: str, args: str = "{}", *extra: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["call", tool, args, "--lab", str(lab), *extra])


def _edited(vlab: VlabLayout, tmp_path: Path, pattern: str, repl: str) -> Path:
    text = re.sub(pattern, repl, vlab.lab_toml.read_text(), count=1, flags=re.M)
    out = tmp_path / "lab.toml"
    out.write_text(text)
    return out


def test_lab_status_json_record(vlab: VlabLayout) -> None:
    res = _call(vlab.lab_toml, "lab_status", "{}", "--json")
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout)
    assert record["ok"] and record["tool"] == "lab_status" and record["duration_s"] > 0
    assert record["result"]["target_process"] == "stad"


def test_a_tool_the_lab_cannot_run_is_refused_at_the_cli_door(vlab: VlabLayout) -> None:
    """The vlab has no traffic load: `traffic_sweep` is refused not_applicable (exit 1) with the
    profile key, and the refusal is in the transcript like any call."""
    res = _call(vlab.lab_toml, "traffic_sweep", '{"bitrates_mbps": [5]}')
    assert res.exit_code == 1, res.output
    assert "refused" in res.output and "does not apply to this lab" in res.output, res.output
    assert "iperf3" in res.output and "remedy" in res.output
    with TranscriptStore(vlab.data_dir / "transcripts.db") as store:
        events = [e.event for e in store.events(store.sessions()[0].id)]
    refusals = [e for e in events if e.kind == "guard_decision" and e.code == "not_applicable"]
    assert refusals and refusals[-1].tool == "traffic_sweep"


def test_help_shows_the_schema() -> None:
    res = runner.invoke(app, ["call", "associate", "--help"])
    assert res.exit_code == 0
    assert "per_radio" in res.stdout and "stations" in res.stdout and "mutates_dut" in res.stdout


def test_unknown_patch_is_a_clear_failure(vlab: VlabLayout) -> None:
    res = _call(vlab.lab_toml, "build", '{"patches": ["0999"]}')
    assert res.exit_code == 1
    assert "unknown patch '0999'" in res.output and "remedy" in res.output and "0901" in res.output


def test_arguments_must_be_a_json_object(vlab: VlabLayout) -> None:
    assert _call(vlab.lab_toml, "associate", "stations=18").exit_code == 2
    res = _call(vlab.lab_toml, "associate", "[18]")
    assert res.exit_code == 2 and "JSON object" in res.output
    res = _call(vlab.lab_toml, "associate", '{"stations": "many"}')
    assert res.exit_code == 2 and "stations" in res.output


def test_bad_profile_names_the_key(vlab: VlabLayout, tmp_path: Path) -> None:
    bad = _edited(vlab, tmp_path, r"^port = \d+", 'port = "twenty-two"')
    res = _call(bad, "lab_status")
    assert res.exit_code == 2
    assert "dut.ssh.port" in res.output and "e.g. port = 22" in res.output
    typo = _edited(vlab, tmp_path, r"^radios = ", "radioz = ")
    res = _call(typo, "lab_status")
    assert res.exit_code == 2 and "load.radioz: unknown key" in res.output
    assert _call(tmp_path / "missing.toml", "lab_status").exit_code == 2


def test_unreachable_dut_gives_the_remedy(vlab: VlabLayout, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # closed when the block ends: nothing listens there
    res = _call(_edited(vlab, tmp_path, r"^port = \d+", f"port = {dead}"), "lab_status")
    assert res.exit_code == 1
    assert f"127.0.0.1:{dead}" in res.output and "[dut.ssh]" in res.output


def test_wrong_host_key_is_refused(vlab: VlabLayout, tmp_path: Path) -> None:
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    res = _call(_edited(vlab, tmp_path, r"^host_key = .*$", f'host_key = "{impostor}"'),
                "lab_status")
    assert res.exit_code == 1
    assert "host key" in res.output.lower() and "remedy" in res.output


class EchoInput(BaseModel):
    word: str = Field(description="the word to say back", examples=["hello"])


class EchoOutput(BaseModel):
    said: str


async def _echo(ctx: LabContext, inp: EchoInput) -> EchoOutput:
    return EchoOutput(said=inp.word)


ECHO = ToolSpec(name="echo_probe", description="say a word back (a throwaway tool of this test)",
                input=EchoInput, output=EchoOutput, run=_echo, effect="host_only")


def test_a_tool_registered_after_import_has_its_door(vlab: VlabLayout,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert "echo_probe" not in runner.invoke(app, ["call", "--help"]).stdout
    monkeypatch.setitem(registry.TOOLS, ECHO.name, ECHO)  # after the CLI was imported
    listing = runner.invoke(app, ["call", "--help"]).stdout
    assert "echo_probe" in listing and "say a word back" in listing and "lab_status" in listing
    res = runner.invoke(app, ["call", "echo_probe", "--help"])
    assert res.exit_code == 0 and "word: string (required) -- the word to say back" in res.stdout
    assert "Effect: host_only; requires: nothing." in res.stdout and "Result fields: said" in res.stdout
    res = _call(vlab.lab_toml, "echo_probe", '{"word": "hello"}')
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"said": "hello"}
    res = _call(vlab.lab_toml, "echo_probe", "{}")
    assert res.exit_code == 2 and "word" in res.output and "remedy:" in res.output
    monkeypatch.delitem(registry.TOOLS, ECHO.name)
    res = _call(vlab.lab_toml, "echo_probe", '{"word": "hello"}')
    assert res.exit_code == 2 and "No such command 'echo_probe'" in res.output


def test_report_door_writes_a_sessions_report(vlab: VlabLayout) -> None:
    assert _call(vlab.lab_toml, "lab_status").exit_code == 0
    with TranscriptStore(vlab.data_dir / "transcripts.db") as store:
        sid = next(s.id for s in store.sessions()
                   if any(isinstance(e.event, ToolCalled) for e in store.events(s.id)))
    res = runner.invoke(app, ["report", sid, "--lab", str(vlab.lab_toml), "--title", "door test",
                              "--name", "door"])
    assert res.exit_code == 0, res.output
    path = Path(res.stdout.strip())
    assert path == vlab.data_dir / "reports" / "door.html"
    assert "door test" in path.read_text()
    res = runner.invoke(app, ["report", sid, "--lab", str(vlab.lab_toml), "--json"])
    assert res.exit_code == 0, res.output
    record = json.loads(res.stdout)
    assert record["ok"] and record["args"]["session"] == sid
    assert record["result"]["path"] == str(vlab.data_dir / "reports" / "report.html")


def test_report_of_an_unknown_session_is_a_clear_error(vlab: VlabLayout) -> None:
    res = runner.invoke(app, ["report", "no-such-session", "--lab", str(vlab.lab_toml)])
    assert res.exit_code == 1
    assert isinstance(res.exception, SystemExit), res.exception  # typer.Exit, not a traceback
    assert "error: report failed (invalid_input): no session 'no-such-session'" in res.output
    assert "remedy: " in res.output and "labwarden transcripts list" in res.output
    assert res.stdout == ""
