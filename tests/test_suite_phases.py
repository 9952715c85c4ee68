"""`make test`'s two phases (scripts/test-suite.sh): which markers each phase selects, that every
test lands in exactly one, that the light tests run on xdist workers a module to a worker and
the qlab streams at idle priority (a cpu.idle cgroup and nice 19), that every phase runs when an
earlier one failed, and which exit status comes out. The script is real; the pytest it drives is
a stand-in that records its arguments and exits as told (the suite itself is what `make test`
runs)."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
from pathlib import Path

from tests.conftest import GUEST_MODULES, LIGHT_MODULES

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "test-suite.sh"


def run(tmp_path: Path, exits: dict[str, int]) -> tuple[int, list[list[str]], str]:
    """The script over a stand-in pytest that exits with `exits[<its -m expression>]` (0 when
    not named); returns the script's status, each stand-in call's arguments and the output."""
    calls = tmp_path / "calls"
    stand_in = tmp_path / "pytest"
    cases = "\n".join(f'  "{expr}") exit {code} ;;' for expr, code in exits.items())
    # each call's line: its nice value, its cpu cgroup, then its arguments; its -m expression
    # picks its exit
    cgroup = ("cg=$(grep -E '^[0-9]+:([^:]*,)?cpu(,[^:]*)?:' /proc/self/cgroup | cut -d: -f3); "
              "[ -n \"$cg\" ] || cg=$(grep '^0::' /proc/self/cgroup | cut -d: -f3)\n")
    stand_in.write_text(f'#!/usr/bin/env bash\n{cgroup}echo "$(nice) $cg $*" >> "{calls}"\n'
                        'echo "ran $*"\n'
                        'while [ $# -gt 0 ] && [ "$1" != -m ]; do shift; done\n'
                        f'case "$2" in\n{cases}\n  *) exit 0 ;;\nesac\n')
    stand_in.chmod(0o755)
    res = subprocess.run([str(SCRIPT), str(stand_in), "--durations=3"], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    args = [line.split() for line in calls.read_text().splitlines()]
    return res.returncode, args, res.stdout


def test_the_phases_partition_the_suite_and_every_one_runs(tmp_path: Path) -> None:
    status, calls, out = run(tmp_path, {})
    assert status == 0, out
    by_expr = {" ".join(c[c.index("-m") + 1:]): c[:1] + c[2:] for c in calls}
    cgroups = {" ".join(c[c.index("-m") + 1:]): c[1] for c in calls}
    exprs = sorted(by_expr)
    assert exprs == ["guest and not icount", "icount", "light and not icount and not guest",
                     "not icount and not light and not guest"]
    assert all(c[1] == "--durations=3" for c in by_expr.values())  # ARGS passed on
    light = by_expr["light and not icount and not guest"]
    assert light[2:6] == ["-n", "3", "--dist", "loadfile"]  # on workers, a module to a worker
    niceness = {expr: int(c[0]) for expr, c in by_expr.items()}
    base = niceness["not icount and not light and not guest"]
    assert niceness["light and not icount and not guest"] == base  # the measured tests: as run
    assert niceness["icount"] == niceness["guest and not icount"] == min(19, base + 19)
    # as root, on a cgroup of its own with cpu.idle set: QEMU gets no CPU a measurement wants
    # (nice alone does not hold across the kernel's autogroups); else said to be nice 19 only
    idle = re.search(r"cgroup (\S+), cpu\.idle 1", out)
    if os.geteuid() == 0 and (Path("/sys/fs/cgroup/cpu/cpu.idle").exists()
                              or "cpu" in _controllers()):
        assert idle, out
    for expr in ("icount", "guest and not icount"):
        assert (idle is not None) == cgroups[expr].startswith("/labwarden-suite-"), (expr, cgroups)
    assert not cgroups["not icount and not light and not guest"].startswith("/labwarden-suite-")
    assert idle is None or not Path(idle.group(1)).exists()  # removed at the end
    # every combination of the markers is selected by exactly one stream's expression (these use
    # only names, `and` and `not`: python reads them as pytest's -m does)
    for marks in itertools.product((True, False), repeat=3):
        names = dict(zip(("icount", "light", "guest"), marks, strict=True))
        chosen = [e for e in exprs if eval(e, {}, names)]
        assert len(chosen) == 1, (names, chosen)
    for name, expr in (("icount", "icount"), ("guest", "guest and not icount")):
        printed = out.index(f"ran --durations=3 -m {expr}\n")  # whole, in its place
        assert out.index(f"phase 2: the {name} tests\n") < printed < out.index("phase 2 took")
        assert out.index("phase 1 took") < out.index("== phase 2: the measured tests")


def _controllers() -> list[str]:
    try:
        return Path("/sys/fs/cgroup/cgroup.controllers").read_text().split()
    except OSError:
        return []


def test_the_first_failure_is_the_status_and_later_phases_still_run(tmp_path: Path) -> None:
    light, rest = "light and not icount and not guest", "not icount and not light and not guest"
    for name, exits, want in (("later", {light: 1, rest: 2}, 1),
                              ("background", {"icount": 3}, 3),
                              ("second background", {"guest and not icount": 4}, 4),
                              ("measured before background", {"guest and not icount": 4, rest: 1}, 1),
                              ("empty", {"icount": 5, light: 5}, 0)):
        here = tmp_path / name
        here.mkdir()
        status, calls, out = run(here, exits)
        assert status == want and len(calls) == 4, (name, out)  # 5: a phase that selects
        # nothing (a single test file in ARGS) is not a failure


def test_every_light_and_guest_module_is_a_test_module() -> None:
    """A misspelt name would move nothing into phase 1 and say nothing."""
    missing = sorted(m for m in LIGHT_MODULES | GUEST_MODULES
                     if not (ROOT / "tests" / f"{m}.py").is_file())
    assert missing == []
