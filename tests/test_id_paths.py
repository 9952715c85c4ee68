"""Identifiers that become paths (issue 15, class 1): patch ids, record ids, artifact names,
report names and resource URIs are resolved with symlinks followed and contained by component
in their one root -- tried with every spelling (a planted symlink, '..' after normalisation,
absolute, cwd-relative, over-long). Each attempt is refused, lands in the transcript, and leaves
the host filesystem and the DUT as they were. Real vlab, real git/make, real MCP client."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from labwarden.core.digest import bounded_name
from labwarden.core.paths import PathRefused, contained, within
from labwarden.lab.config import LabProfile
from labwarden.lab.host import builder
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import LabSession, open_lab
from labwarden.server.app import build_server
from labwarden.transcripts.store import TranscriptStore
from labwarden.vlab.layout import VlabLayout

from .test_guard_corpus import dut_snapshot

pytestmark = pytest.mark.anyio
LONG = "a" * 300


def _tree(*roots: Path) -> dict[str, str]:
    """Every file under `roots` (symlinks as their target) with its content hash."""
    out = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.is_symlink():
                out[str(p)] = "->" + str(p.readlink())
            elif p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _evil_patch(lab: VlabLayout, marker: Path, dest: Path) -> Path:
    """A real patch against the firmware whose Makefile line touches `marker` when built."""
    clone = dest.parent / "clone"
    subprocess.run(["git", "clone", "-q", str(lab.src), str(clone)], check=True)
    mk = clone / "Makefile"
    text = mk.read_text()
    rule = "all: $(O)/libsta.so $(PROGS:%=$(O)/%)\n"
    assert rule in text
    mk.write_text(text.replace(rule, rule + f"\ttouch {marker}\n"))
    diff = subprocess.run(["git", "-C", str(clone), "diff"], check=True, capture_output=True).stdout
    dest.write_bytes(diff)
    return dest


@pytest.fixture
async def session(lab: VlabLayout) -> AsyncIterator[LabSession]:
    async with open_lab(LabProfile.from_file(lab.lab_toml), client="test") as ctx:
        yield ctx


def _calls(ctx: LabSession) -> list[Any]:
    assert ctx.transcript is not None and ctx.session_id is not None
    return [e.event for e in ctx.transcript.events(ctx.session_id) if e.event.kind == "tool_called"]


def test_the_containment_function_on_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "root-evil").mkdir()
    (tmp_path / "secret").write_text("s")
    (root / "out").symlink_to(tmp_path / "secret")
    (root / "loop").symlink_to(root / "loop")
    (root / "ok").write_text("fine")
    assert within(root, "ok") == (root / "ok").resolve()
    for names in (("out",), ("..",), ("sub", ".."), ("../secret",), ("/etc/passwd",), (LONG,),
                  ("",), (".hidden",), ("-rf",), ("a b",), ("x\ny",)):
        with pytest.raises(PathRefused):
            within(root, *names)
    monkeypatch.chdir(root)  # the cwd is never where a relative path is looked up
    for raw in ("ok", "./ok", "sub/../ok", str(root / "sub" / ".." / ".." / "secret"),
                str(tmp_path / "root-evil" / "x"), str(root / "out"), "/" + LONG + "/x",
                str(root / "loop"), "~/ok", str(root) + "/" + "b" * 256):
        with pytest.raises(PathRefused):
            contained(raw, [root])
    assert contained(str(root / "sub" / ".." / "ok"), [root]) == (root / "ok").resolve()


async def test_patch_ids_and_paths_are_contained(lab: VlabLayout, session: LabSession,
                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A symlink planted in a patch directory is refused (its Makefile line never runs); a bare
    name is never looked up in the cwd; '..', absolute, long -- each refused and logged."""
    marker = tmp_path / "pwned"
    outside = tmp_path / "outside"
    outside.mkdir()
    evil = _evil_patch(lab, marker, outside / "0999-evil.patch")
    planted = lab.root / "patches"
    planted.mkdir(exist_ok=True)
    (planted / "0999-evil.patch").symlink_to(evil)
    (planted / "0998.patch").symlink_to(evil)
    monkeypatch.chdir(outside)  # a cwd holding a patch by a bare name
    (outside / "cwdpatch.patch").write_bytes(evil.read_bytes())
    before_host, before_dut = _tree(lab.builds, outside), dut_snapshot(lab)
    attempts = [
        ["0999"], ["0998"], ["0999-evil"], ["cwdpatch"], ["cwdpatch.patch"], ["./cwdpatch.patch"],
        [str(planted / "0999-evil.patch")], [str(planted / ".." / ".." / "outside" / "x.patch")],
        [str(evil)], ["../0901"], [str(planted / ".." / "patches" / "0999-evil.patch")],
        [LONG], [LONG + ".patch"], [str(planted / LONG) + ".patch"], ["0901", "0999"],
    ]
    n0 = len(_calls(session))
    for patches in attempts:
        rec = await call_tool(session, "build", {"patches": patches})
        assert not rec.ok and rec.error is not None, patches
        assert rec.error.kind in ("refused", "invalid_input", "build"), (patches, rec.error)
        if rec.error.kind == "build":  # not found: the bare name was not taken from the cwd
            assert "unknown patch" in " ".join(rec.error.lines), (patches, rec.error)
        else:
            assert rec.error.code in ("unsafe_path", "unsafe_argument", "invalid_input"), rec.error
        assert "OSError" not in rec.error.message and "File name too long" not in rec.error.message
    assert not marker.exists(), "the planted patch's Makefile line ran"
    assert _tree(lab.builds, outside) == before_host
    assert dut_snapshot(lab) == before_dut
    assert len(_calls(session)) - n0 == len(attempts)  # every attempt is in the transcript
    # the control: the same bytes as a real file in the patch directory are applied and built
    (planted / "0999-evil.patch").unlink()
    (planted / "0999-evil.patch").write_bytes(evil.read_bytes())
    try:  # its line runs -- confined (tests/test_build_confinement.py): the host path is not there
        with pytest.raises(builder.BuildError) as ran:
            builder.build(builder.recipe_of(session.profile.build,
                                            session.profile.dut.paths.rootfs), ["0999"])
        assert any("touch" in ln and str(marker) in ln for ln in ran.value.lines), \
            "the control patch did not run its Makefile line: the test has no teeth"
        assert not marker.exists()
    finally:
        for f in planted.iterdir():
            f.unlink()


async def test_record_ids_and_report_names_are_contained(lab: VlabLayout, session: LabSession,
                                                         tmp_path: Path) -> None:
    """A record file planted as a symlink out of records/ is not read; a report name whose file is
    a planted symlink is not written through."""
    secret = tmp_path / "swp.json"
    secret.write_text(json.dumps({"id": "swp-0123456789ab", "points": []}))
    rec_dir = lab.data_dir / "records" / "swp"
    rec_dir.mkdir(parents=True, exist_ok=True)
    (rec_dir / "swp-0123456789ab.json").symlink_to(secret)
    target = tmp_path / "victim.html"
    target.write_text("untouched")
    reports = lab.data_dir / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "planted.html").symlink_to(target)
    n0 = len(_calls(session))
    try:
        for args in ({"baseline": "swp-0123456789ab", "candidate": "swp-0123456789ab"},
                     {"baseline": "swp-" + "0" * 300, "candidate": "swp-0123456789ab"}):
            rec = await call_tool(session, "compare", args)
            assert rec.error is not None and rec.error.code in ("unsafe_path", "invalid_input",
                                                                "unsafe_argument"), rec.error
        rec = await call_tool(session, "gate_check", {"sweep_id": "swp-0123456789ab"})
        assert rec.error is not None and rec.error.code == "unsafe_path", rec.error
        rec = await call_tool(session, "report", {"name": "planted"})
        assert rec.error is not None and rec.error.code == "unsafe_path", rec.error
        assert target.read_text() == "untouched"
        assert len(_calls(session)) - n0 == 4  # every attempt is in the transcript
    finally:
        (rec_dir / "swp-0123456789ab.json").unlink()
        (reports / "planted.html").unlink()


async def test_resources_never_leave_the_data_dir(lab: VlabLayout, tmp_path: Path) -> None:
    """Symlinks planted under artifacts/, symbolized/ and records/ (files and whole directories),
    '..' spelled in and out of URL escapes, and over-long names: refused through the SDK's
    client, and never the outside file's content."""
    secret = tmp_path / "secret"
    secret.mkdir()
    for name in ("flame.svg", "stacks.folded", "prof-00000000beef.json", "x.txt"):
        (secret / name).write_text("SECRET <svg>")
    data = lab.data_dir
    art = data / "artifacts" / "prof-00000000cafe"
    art.mkdir(parents=True, exist_ok=True)
    (art / "x.txt").symlink_to(secret / "x.txt")
    (data / "artifacts" / "prof-00000000dead").symlink_to(secret, target_is_directory=True)
    sym = data / "symbolized" / "00000000000000aa"
    sym.mkdir(parents=True, exist_ok=True)
    (sym / "flame.svg").symlink_to(secret / "flame.svg")
    (data / "symbolized" / "00000000000000bb").symlink_to(secret, target_is_directory=True)
    prof = data / "records" / "prof"
    prof.mkdir(parents=True, exist_ok=True)
    (prof / "prof-00000000beef.json").symlink_to(secret / "prof-00000000beef.json")
    uris = [
        "labwarden://artifacts/prof-00000000cafe/x.txt",
        "labwarden://artifacts/prof-00000000dead/x.txt",
        "labwarden://artifacts/prof-00000000dead",
        "labwarden://artifacts/prof-00000000cafe/..%2F..%2F..%2Flab.toml",
        "labwarden://artifacts/prof-00000000cafe/" + LONG + ".txt",
        "labwarden://symbolized/00000000000000aa/flame.svg",
        "labwarden://symbolized/00000000000000bb/flame.svg",
        "labwarden://symbolized/00000000000000bb/stacks.folded",
        "labwarden://records/profiles/prof-00000000beef",
        "labwarden://records/profiles/prof-" + "f" * 300,
        "labwarden://reports/" + LONG + ".html",
        "labwarden://reports/..%2Flab.toml",
    ]
    with TranscriptStore(lab.data_dir / "transcripts.db") as store:
        before = {x.id for x in store.sessions()}
    try:
        async with Client(build_server(LabProfile.from_file(lab.lab_toml))) as client:
            listing = json.loads((await client.read_resource(
                "labwarden://artifacts/prof-00000000cafe")).contents[0].text)  # type: ignore[union-attr]
            assert listing == {}  # the planted link is not even listed
            for uri in uris:
                with pytest.raises(MCPError) as info:
                    await client.read_resource(uri)
                assert "SECRET" not in str(info.value) and "Errno" not in str(info.value), uri
        with TranscriptStore(lab.data_dir / "transcripts.db") as store:  # every attempt logged
            reads = [e.event for x in store.sessions() if x.id not in before
                     for e in store.events(x.id) if e.event.kind == "resource_read"]
        assert sorted(r.uri for r in reads if not r.ok) == sorted(bounded_name(u) for u in uris)
        assert len(reads) == len(uris) + 1 and sum(r.ok for r in reads) == 1, reads
    finally:
        for p in (art / "x.txt", data / "artifacts" / "prof-00000000dead", sym / "flame.svg",
                  data / "symbolized" / "00000000000000bb", prof / "prof-00000000beef.json"):
            p.unlink()
