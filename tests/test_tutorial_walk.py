"""The tutorial (docs/tutorial.md), followed as a new user would, command for command: every
```sh block of the page, in order and as printed, runs in one `bash -e -o pipefail` on a box the
suite makes -- the logfilt daemon behind Debian's dropbear with busybox ash (tests/stockdut.py),
its firmware already built and flashed, as a device on a bench comes -- and the walk ends with a
kept patch.

The one block not run as printed is step 0's, where the reader says where the DUT is: the test
says instead where this one is (its address, port, key, repo, and the layout the page's
`${NAME:-value}` defaults leave to a DUT that keeps its files under a directory). HOME is a
directory of the test's own, so `~/lab-logfilt` and `$HOME/fw-builds` land there.

Real parts only: dropbear, busybox, the confined C build, sysupgrade with a new boot, perf,
uprobes, the decision rule; the commands are the page's, through the installed `labwarden`."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from tests import stockdut
from tests.ci_skips import missing
from tests.conftest import needs_uprobes
from tests.logfilt_patches import FIX, diff

pytestmark = pytest.mark.timeout(1200)

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorial.md"
SETTINGS = ("DUT", "PORT", "KEY", "REPO")
"""What step 0 asks the reader to set."""
LAYOUT = ("DUT_PATH", "ROOTFS", "OVERLAY", "DUT_TMP", "DUT_RUN")
"""What the page's profile leaves at a router's value unless set (`${NAME:-value}`)."""


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```$", text, re.S | re.M)


def profile_block(text: str) -> dict[str, Any]:
    blocks = [b for b in re.findall(r"```toml\n(.*?)```", text, re.S) if "[lab]" in b]
    assert len(blocks) == 1, "the tutorial shows one profile"
    return tomllib.loads(blocks[0])


def test_step_0_is_settings_only_and_every_command_exists() -> None:
    """Step 0's block sets the reader's variables and nothing else; every `labwarden` command of
    the page names a command and options that exist (its --help answers, and names each option)."""
    blocks = sh_blocks(TUTORIAL.read_text())
    words = shlex.split(blocks[0])
    assert words[0] == "export" and [w.split("=")[0] for w in words[1:]] == list(SETTINGS), blocks[0]
    env = {**os.environ, "COLUMNS": "200"}
    exe = Path(sys.executable).parent / "labwarden"
    seen = 0
    for block in blocks[1:]:
        for line in block.splitlines():
            m = re.search(r"(?:^|\| |\$\()labwarden ((?:[a-z_]+ ?)+)(.*)", line)
            if m is None:
                continue
            cmd = m.group(1).split()
            if cmd[0] == "call":
                cmd = cmd[:2]
            elif cmd[0] == "lab":
                cmd = cmd[:2]
            else:
                cmd = cmd[:1]
            res = subprocess.run([str(exe), *cmd, "--help"], capture_output=True, text=True,
                                 env=env, timeout=60)
            assert res.returncode == 0, (line, res.stderr)
            for opt in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", m.group(2)):
                assert opt in res.stdout, (line, opt)
            seen += 1
    assert seen >= 15, seen


def test_the_page_profile_is_what_the_heredoc_writes_for_a_router(tmp_path: Path) -> None:
    """The ```toml profile the page shows is what its heredoc writes with the page's own example
    settings (a router at 10.0.3.2), but for the host key lab init pins."""
    blocks = sh_blocks(TUTORIAL.read_text())
    heredoc = next(b for b in blocks if "cat > lab.toml" in b)
    home = tmp_path / "home"
    (tmp_path / "guess.toml").write_text('host_key = "ssh-ed25519 AAAAfromlabinit"\n')
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    script = blocks[0] + heredoc
    subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, check=True, timeout=30)
    written = tomllib.loads((tmp_path / "lab.toml").read_text())
    shown = profile_block(TUTORIAL.read_text())
    assert written["dut"]["ssh"].pop("host_key") == "ssh-ed25519 AAAAfromlabinit"
    shown["dut"]["ssh"].pop("host_key")
    for key in ("key",):
        shown["dut"]["ssh"][key] = shown["dut"]["ssh"][key].replace("/home/you", str(home))
    for key in ("repo", "builds"):
        shown["build"][key] = shown["build"][key].replace("/home/you", str(home))
    assert written == shown
    LabProfile.from_file(tmp_path / "lab.toml")


def test_the_page_diff_is_the_suites_fix() -> None:
    """The patch the page has the reader write is the suite's logfilt fix (tests/logfilt_patches.py)
    against the packaged tree: a change to logfilt.c that breaks it fails here first."""
    text = TUTORIAL.read_text()
    page = text.split("cat > lower-once.diff <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0] + "\n"
    assert page == diff("logfilt.c", FIX)


async def bench_firmware(suite_lab: Path) -> None:
    """Build and flash the DUT's firmware through the suite's own profile."""
    async with open_lab(LabProfile.from_file(suite_lab)) as ctx:
        built = await call_tool(ctx, "build", {})
        assert built.ok and built.result, built.error
        flashed = await call_tool(ctx, "flash", {"build_id": built.result["build_id"]})
        assert flashed.ok, flashed.error


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Path]]:
    """The logfilt DUT with its firmware running (built and flashed through the suite's own
    profile, before the reader arrives); yields step 0's settings for it and the reader's HOME."""
    needs_uprobes()
    if shutil.which("jq") is None:
        missing("jq not installed (apt-get install jq; scripts/setup-system.sh installs it)")
    root = tmp_path_factory.mktemp("tutorial")
    for server, suite_lab in stockdut.logfilt_dut(root):
        anyio.run(bench_firmware, suite_lab)
        dut = server.root
        suite = tomllib.loads(suite_lab.read_text())
        settings = {"DUT": "127.0.0.1", "PORT": str(server.port), "KEY": str(server.client_key),
                    "REPO": suite["build"]["repo"],
                    "DUT_PATH": suite["dut"]["env"]["PATH"], "ROOTFS": f"{dut}/rootfs",
                    "OVERLAY": f"{dut}/overlay", "DUT_TMP": f"{dut}/tmp", "DUT_RUN": f"{dut}/run"}
        assert set(settings) == set(SETTINGS) | set(LAYOUT)
        home = root / "home"
        home.mkdir()
        yield settings, home


def test_follow_the_tutorial_to_a_kept_patch(box: tuple[dict[str, str], Path]) -> None:
    settings, home = box
    blocks = sh_blocks(TUTORIAL.read_text())
    ours = "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items()) + "\n"
    script = "".join([ours, *(f"echo '>>> block {i}' >&2\n{b}" for i, b in
                              enumerate(blocks[1:], 1))])
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABWARDEN_")}
    env.update(HOME=str(home), PATH=f"{ROOT / '.tools' / 'bin'}:{env.get('PATH', '')}",
               COLUMNS="120")
    t0 = time.monotonic()
    res = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1100)
    took = time.monotonic() - t0
    print(f"\nthe tutorial's {len(blocks)} sh blocks: exit {res.returncode} in {took:.0f} s")
    assert res.returncode == 0, f"{res.stderr[-4000:]}\n--- stdout ---\n{res.stdout[-3000:]}"

    lab = home / "lab-logfilt"
    assert "every check passed" in res.stdout, res.stdout[-3000:]  # step 3: lab check ok

    def result(name: str) -> dict[str, Any]:
        record = json.loads((lab / name).read_text())
        assert record["ok"], record
        out: dict[str, Any] = record["result"]
        return out

    status = result("status.json")
    assert status["workload"]["load_kind"] == "none" and status["workload"]["points"] == [0]
    verified = result("verified.json")
    assert verified["verified"], verified["mismatches"]
    flame = result("flame.json")
    assert Path(flame["svg"]).is_file() and Path(flame["svg"]).stat().st_size > 1000
    match = {f["name"]: f for f in flame["functions"]}["match_rule"]
    assert match["total_pct"] > 50, flame["tree"]
    exp = result("experiment.json")
    print(f"experiment: {exp['decision']} ({exp['verdict']}) {exp['mean_a']:.2f} -> "
          f"{exp['mean_b']:.2f} ({exp['delta_pct']:+.1f}%, windows {exp['windows']}) -- "
          f"{exp['reason']}")
    assert exp["decision"] == "kept" and exp["verdict"] == "improved", exp
    assert exp["gates_failed"] == [] and exp["delta_pct"] < -50, exp
    assert exp["patch"] == result("submitted.json")["patch_id"]
    assert exp["sweep_a"] == result("baseline.json")["sweep_id"]  # the baseline is A's sweep
    report = res.stdout.strip().splitlines()[-1]  # `labwarden report --all` prints its path
    assert report.endswith(".html") and Path(report).is_file(), res.stdout[-2000:]
    assert "lower-once" in Path(report).read_text()
