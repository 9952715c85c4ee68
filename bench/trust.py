"""The drift bench (issue [4/1]'s acceptance): live experiments while a background load switches
on and off at random, on a lab brought up for the run. No-ops (each a different comment, so
every build differs) and a ~10% effect, in a seeded random order, each one `patch_submit` +
`experiment` through the real runtime (call_tool / open_lab), as an agent would call them.

    .venv/bin/python bench/trust.py --lab-kind vlab|logfilt|qlab [--noops 20] [--effects 10]
        [--background on|off] [--out FILE.json] [--seed 1] [--clock CLOCK]
    .venv/bin/python bench/trust.py --report FILE.json [FILE.json ...]   # the table again
    .venv/bin/python bench/trust.py --lab-kind logfilt --calibrate --noops 0 --effects 0

--calibrate: the `calibrate` tool on the lab first (before the background starts: the lab's own
noise), its numbers printed and appended to --out as a `calibration` line.

The labs: the vlab (`vlab up`); logfilt, the suite's second firmware (a daemon with no clients,
flashed by `sysupgrade` over SSH onto a DUT behind Debian's dropbear on this host:
tests/stockdut.py), with the profile its README prints (no [decision]: the default rule); the
qlab (`qlab up`). The flash budget is lifted for the run (every experiment flashes A and B).
The effects: tests/patching.py EFFECT_10 on the vlab, tests/logfilt_patches.py EFFECT_10 on
logfilt (each ~10% less CPU; their docstrings give the measured figure), the shipped 0901 on
the qlab (a third).

The background (--background on): one CPU hog on this host (every lab's DUT runs here), a busy
loop of one process -- one core's worth -- switched on and off at uniformly random intervals of
15-45 s by a thread, for the whole run, killed at exit (Ctrl-C and SIGTERM too; a SIGKILLed bench
takes it along: PR_SET_PDEATHSIG). Each experiment's record holds the hog's switches during it
and, per window of its screening, the share of the window the hog was on.

--out: one JSON object a line, appended as the run goes (a run cut short keeps what it did): a
`run` line (arguments, the labwarden tree, host load), one `experiment` line per experiment
(kind, decision, verdict, delta, interval, windows n_a+n_b, lab_seconds, start/end, load
average, the hog's switches and per-window share), and a `background` line at the end with
every switch. The table at the end: per kind, improved/regressed/same/unknown; the rates the
issue bounds with PASS/FAIL (no-op called improved or regressed <= 1 in 20, each listed; no-op
'same' >= 80%; effect 'improved' >= 90%); the median lab minutes per decided candidate.

Today's rule (the judge before issue [4/1], commit 09e5cf4) on the same bench: a worktree of
that commit, this script and the two patch modules copied in, run with this venv (the script
puts its own checkout first on sys.path, so the worktree's labwarden and tests are imported):

    git worktree add /tmp/today 09e5cf4
    cp bench/trust.py /tmp/today/bench/ && cp tests/patching.py tests/logfilt_patches.py /tmp/today/tests/
    ln -s "$PWD/.tools" /tmp/today/.tools      # inferno: without it every kept effect is dropped
    .venv/bin/python /tmp/today/bench/trust.py --lab-kind vlab --noops 20 --effects 10 \\
        --background on --out today-vlab.json
    .venv/bin/python bench/trust.py --report today-vlab.json now-vlab.json

The script uses only what both trees have: the patch_submit and experiment tools, open_lab, the
experiment and measurement records' windows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import difflib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's labwarden and tests (a worktree of another commit)

from pydantic import ValidationError  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from labwarden.core.experiments import Experiment  # noqa: E402
from labwarden.core.measurements import MeasurementRecord  # noqa: E402
from labwarden.core.records import RecordStore  # noqa: E402
from labwarden.lab.config import LabProfile  # noqa: E402
from labwarden.runtime.runner import call_tool  # noqa: E402
from labwarden.runtime.session import open_lab  # noqa: E402

KINDS = ("vlab", "logfilt", "qlab")
HOG_S = (15.0, 45.0)
"""The background's on and off spells: uniform in this range (the issue's 15-45 s)."""
LIMITS = {"false_calls": 1 / 20, "noop_same": 0.80, "effect_improved": 0.90}
"""The issue's bounds: no-ops called improved or regressed <= 1 in 20; no-ops 'same' >= 80%
within the cap; the ~10% effect 'improved' >= 90%."""
COMMENT_FILE = {"vlab": "wld.c", "qlab": "wld.c", "logfilt": "logfilt.c"}
"""The file each lab's no-ops put their comment in."""


# ---- the background -------------------------------------------------------------------------

def _die_with_parent() -> None:
    """In the hog's child: SIGKILL it when the bench dies, however it dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


class Background:
    """One busy process on this host, switched on and off at uniform random spells; every
    switch logged as (wall time, on)."""

    def __init__(self, rng: random.Random, spells: tuple[float, float] = HOG_S) -> None:
        self.rng, self.spells = rng, spells
        self.events: list[tuple[float, bool]] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hog", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()

    def _switch(self, on: bool) -> None:
        with self._lock:
            if on and self._proc is None:
                self._proc = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                              preexec_fn=_die_with_parent,
                                              start_new_session=True)  # not the terminal's ^C
            elif not on and self._proc is not None:
                self._proc.kill()
                self._proc.wait()
                self._proc = None
            else:
                return
            self.events.append((time.time(), on))

    def _run(self) -> None:
        on = self.rng.random() < 0.5
        while not self._stop.is_set():
            self._switch(on)
            if self._stop.wait(self.rng.uniform(*self.spells)):
                break
            on = not on

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._switch(False)

    def on_share(self, t0: float, t1: float) -> float | None:
        """The share of [t0, t1] the hog was on."""
        if t1 <= t0:
            return None
        return share_on(self.events, t0, t1)


def share_on(events: list[tuple[float, bool]], t0: float, t1: float) -> float:
    on_s, state, since = 0.0, False, t0
    for t, on in events:
        if t >= t1:
            break
        if t > since:
            on_s += (t - since) if state else 0.0
            since = t
        state = on
    on_s += (t1 - since) if state else 0.0
    return round(on_s / (t1 - t0), 3)


# ---- the labs and their patches --------------------------------------------------------------

@contextlib.contextmanager
def lab(kind: str, root: Path, clock: str | None, console: Console) -> Iterator[LabProfile]:
    """The lab brought up under `root` (and down after), its flash budget lifted for the run."""
    if kind == "logfilt":
        with _logfilt(root) as path:
            profile = LabProfile.from_file(path)
            profile.policy.budgets.flashes_per_hour = None
            yield profile
        return
    if kind == "qlab":
        from labwarden.qlab import control as qlab_control
        try:
            info = qlab_control.up(root, clock=clock)
            console.print(f"qlab: {info.accel.name}, clock {info.clock.spec}; up in "
                          f"{info.timings['total']:.0f} s")
            profile = LabProfile.from_file(root / "lab.toml")
            profile.policy.budgets.flashes_per_hour = None
            yield profile
        finally:
            qlab_control.down(root)
        return
    from labwarden.vlab import control as vlab_control
    try:
        vlab_control.up(root)
        yield LabProfile.from_file(root / "lab.toml")
    finally:
        vlab_control.down(root)


@contextlib.contextmanager
def _logfilt(root: Path) -> Iterator[Path]:
    """The suite's logfilt DUT (tests/stockdut.py): dropbear, busybox ash, an empty rootfs that
    each experiment's flashes fill. Yields its lab profile's path (the README's profile)."""
    from labwarden.vlab import stockssh
    from tests import stockdut

    why = stockssh.unavailable("dropbear")
    if why:
        sys.exit(f"logfilt: dropbear: {why}")
    with contextlib.contextmanager(stockdut.logfilt_dut)(root) as (_server, path):
        yield path


def comment_diff(profile: LabProfile, path: str, line: str) -> str:
    """A comment line appended to `path` of the lab's `[build] repo` at HEAD: the same code."""
    repo = Path(profile.build.repo).expanduser()
    text = subprocess.run(["git", "-C", str(repo), "show", f"HEAD:{path}"], capture_output=True,
                          text=True, check=True).stdout
    after = text + ("" if text.endswith("\n") else "\n") + line
    return "".join(difflib.unified_diff(text.splitlines(True), after.splitlines(True),
                                        f"a/{path}", f"b/{path}"))


def effect_patch(kind: str) -> tuple[str, str | None]:
    """The ~10% effect: (name, diff); a diff of None names a shipped patch (the qlab's 0901)."""
    if kind == "vlab":
        from tests import patching
        return "effect-10", patching.change("wld.c", *patching.EFFECT_10)
    if kind == "logfilt":
        from tests import logfilt_patches
        return "effect-10", logfilt_patches.diff("logfilt.c", logfilt_patches.EFFECT_10)
    return "0901", None


def with_decision(profile: LabProfile, sets: list[str]) -> LabProfile:
    """The profile with `--decision KEY=JSON` settings, validated as the profile would be (a
    bad key or value stops the bench before the lab is used)."""
    if not sets:
        return profile
    updates: dict[str, Any] = {}
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep:
            sys.exit(f"--decision {item!r}: expected KEY=JSON, e.g. round_windows=1")
        try:
            updates[key] = json.loads(raw)
        except json.JSONDecodeError:
            updates[key] = raw  # a bare word: a string
    try:
        dec = type(profile.decision).model_validate(
            {**profile.decision.model_dump(exclude_unset=True), **updates})
    except ValidationError as e:
        sys.exit(f"--decision: {e}")
    return profile.model_copy(update={"decision": dec})


# ---- one experiment --------------------------------------------------------------------------

def _windows(store: RecordStore, experiment_id: str, hog: Background | None) -> list[dict[str, Any]]:
    """The screening's windows, in the order measured per arm: when each started, how long it
    took, its value, and the share of it the hog was on."""
    scr = store.load("exp", experiment_id, Experiment).screening
    if scr is None:
        return []
    out: list[dict[str, Any]] = []
    for arm_name, arm in (("a", scr.a), ("b", scr.b)):
        for pid in arm.profile_ids:
            rec = store.load("prof", pid, MeasurementRecord)
            for w in rec.windows:
                t0 = w.started_at.timestamp()
                out.append({"arm": arm_name, "started": w.started_at.isoformat(),
                            "s": round(w.duration_s, 2), "cpu": round(w.cpu_pct, 3),
                            "hog_on": hog.on_share(t0, t0 + w.duration_s) if hog else None})
    return out


async def one(ctx: Any, kind: str, name: str, diff: str | None,
              hog: Background | None) -> dict[str, Any]:
    t0 = time.time()
    row: dict[str, Any] = {"type": "experiment", "kind": kind, "name": name,
                           "start": datetime.fromtimestamp(t0, UTC).isoformat(),
                           "loadavg_start": os.getloadavg()[0]}
    patch = name
    if diff is not None:
        sub = await call_tool(ctx, "patch_submit", {"name": name, "diff": diff})
        if not (sub.ok and sub.result):
            return {**row, "error": f"patch_submit: {sub.error}"}
        patch = sub.result["patch_id"]
    rec = await call_tool(ctx, "experiment", {"patch": patch})
    t1 = time.time()
    row.update(patch=patch, end=datetime.fromtimestamp(t1, UTC).isoformat(),
               wall_s=round(t1 - t0, 1), loadavg_end=os.getloadavg()[0])
    if hog is not None:
        row["hog_on"] = hog.on_share(t0, t1)
        row["hog_switches"] = [[round(t, 1), on] for t, on in hog.events if t0 <= t <= t1]
    out = rec.result
    if not (rec.ok and out):
        return {**row, "error": f"experiment: {rec.error}"}
    windows = out.get("windows") or (None, None)
    row.update({k: out.get(k) for k in ("experiment_id", "decision", "verdict", "reason",
                                        "mean_a", "mean_b", "delta_pct", "ci_pct",
                                        "equivalence_pct", "lab_seconds")},
               n_a=windows[0], n_b=windows[1])
    try:  # the windows' times, for the hog's share of each (records of both trees have them)
        row["window_detail"] = _windows(RecordStore(ctx.data_dir), out["experiment_id"], hog)
    except Exception as exc:  # the verdict stands without them
        row["window_detail_error"] = repr(exc)
    return row


async def calibrate(profile: LabProfile, out: Path, console: Console) -> None:
    """The calibrate tool on the lab's running build, as an agent or the loop would call it."""
    async with open_lab(profile, client="bench") as ctx:
        state = ctx.peek_state()
        if state.flashed_build is None:  # logfilt's DUT starts empty: the base build on it
            built = await call_tool(ctx, "build", {"patches": []})
            if built.ok and built.result:
                await call_tool(ctx, "flash", {"build_id": built.result["build_id"]})
            state = ctx.peek_state()
        if state.flashed_build and not state.fingerprint_ok():  # flashed, not yet verified
            await call_tool(ctx, "fingerprint_verify", {"build_id": state.flashed_build})
        rec = await call_tool(ctx, "calibrate", {})
    if not (rec.ok and rec.result):
        console.print(f"[red]calibrate: {rec.error}[/red]")
        _append(out, {"type": "calibration", "error": str(rec.error)})
        return
    cal = rec.result
    aa, at = cal["aa"], cal["at_min_effect"]
    row = {"type": "calibration", "calibration_id": cal["calibration_id"],
           "design": cal["design"], "windows": cal["noise"]["windows"],
           "window_s": cal["noise"]["window_s"], "mean": cal["noise"]["mean"],
           "cv_pct": cal["noise"]["cv_pct"], "min_effect_pct": cal["rule"]["min_effect_pct"],
           "decidable": cal["decidable"], "smallest_effect_pct": cal["smallest_effect_pct"],
           "found_pct": at["improved_pct"], "aa_same_pct": aa["same_pct"],
           "aa_false_pct": aa["improved_pct"] + aa["regressed_pct"],
           "minutes_noop": aa["minutes"], "minutes_effect": at["minutes"],
           "summary": cal["summary"]}
    _append(out, row)
    console.print(f"calibration {cal['calibration_id']}: {cal['summary']}", highlight=False,
                  markup=False)  # the summary names [decision]: text, not a style tag


async def run_all(profile: LabProfile, plan: list[tuple[str, str, str | None]], out: Path,
                  hog: Background | None, console: Console) -> None:
    async with open_lab(profile, client="bench") as ctx:
        for i, (kind, name, diff) in enumerate(plan, 1):
            row = await one(ctx, kind, name, diff, hog)
            _append(out, row)
            if "error" in row:
                console.print(f"[red]{i}/{len(plan)} {kind} {name}: {row['error']}[/red]")
                continue
            hog_txt = f", hog on {100 * row['hog_on']:.0f}%" if row.get("hog_on") is not None else ""
            console.print(f"{i}/{len(plan)} {kind} {name}: {row['decision']} ({row['verdict']}) "
                          f"{_num(row['delta_pct'], '+.1f')}% CI {row['ci_pct']} windows "
                          f"{row['n_a']}+{row['n_b']}, {row['lab_seconds']:.0f} s{hog_txt}",
                          highlight=False)


def _append(out: Path, row: dict[str, Any]) -> None:
    with out.open("a") as f:
        f.write(json.dumps(row) + "\n")


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _tree() -> dict[str, Any]:
    """Which labwarden ran: its checkout, commit and whether the tree had changes."""
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True,
                              text=True).stdout.strip()
    return {"root": str(ROOT), "commit": git("rev-parse", "HEAD"),
            "dirty": git("status", "--porcelain", "--untracked-files=no").splitlines()}


def _busy() -> list[str]:
    """Other processes using CPU now (ps's top five by %CPU): other work sharing the machine."""
    ps = subprocess.run(["ps", "-eo", "pid=,pcpu=,etime=,args=", "--sort=-pcpu"],
                        capture_output=True, text=True).stdout.splitlines()
    mine = str(os.getpid())
    return [p.strip()[:160] for p in ps if p.split(None, 1)[0] != mine][:5]


# ---- the report ------------------------------------------------------------------------------

def report(console: Console, path: Path) -> None:
    rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    head: dict[str, Any] = next((r for r in rows if r.get("type") == "run"), {})
    exps = [r for r in rows if r.get("type") == "experiment"]
    tree = head.get("tree", {})
    dirty = f" + {len(tree['dirty'])} changed files" if tree.get("dirty") else ""
    console.print(f"[bold]{path}[/bold]: {head.get('lab_kind')} lab, background "
                  f"{head.get('background')}, seed {head.get('seed')}, labwarden "
                  f"{str(tree.get('commit'))[:10]}{dirty} ({tree.get('root')})", highlight=False)
    t = Table(title=f"{len(exps)} live experiments")
    for col in ("kind", "n", "improved", "regressed", "same", "unknown", "error",
                "windows A+B median", "lab min median (decided)", "lab min / decided"):
        t.add_column(col, justify="right")
    for kind in ("noop", "effect"):
        ks = [r for r in exps if r["kind"] == kind]
        if not ks:
            continue
        c = Counter(r.get("verdict") if "error" not in r else "error" for r in ks)
        decided = [r for r in ks if r.get("verdict") in ("improved", "regressed", "same")]
        ws = [r["n_a"] + r["n_b"] for r in ks if r.get("n_a") is not None]
        lab_s = [r.get("lab_seconds") or 0.0 for r in ks]
        t.add_row(kind, str(len(ks)), *(str(c[v]) for v in ("improved", "regressed", "same",
                                                             "unknown", "error")),
                  _num(statistics.median(ws) if ws else None, "g"),
                  _num(statistics.median(r["lab_seconds"] / 60 for r in decided)
                       if decided else None, ".2f"),
                  _num(sum(lab_s) / 60 / len(decided) if decided else None, ".2f"))
    for cal in (r for r in rows if r.get("type") == "calibration"):
        console.print(f"calibration: {cal.get('summary') or cal.get('error')}", highlight=False,
                      markup=False)
    if exps:
        console.print(t)
        checks(console, exps)
    hog = [r["hog_on"] for r in exps if r.get("hog_on") is not None]
    if hog:
        console.print(f"the background was on for {100 * statistics.fmean(hog):.0f}% of the "
                      f"experiments' time (per experiment {min(hog):.0%}-{max(hog):.0%})")
    loads = [r["loadavg_start"] for r in exps if "loadavg_start" in r]
    if loads:
        console.print(f"host load average (1 min) at each experiment's start: "
                      f"{min(loads):.1f}-{max(loads):.1f}; at the run's start "
                      f"{head.get('loadavg')} with {head.get('busy', [])[:3]}", highlight=False)


def checks(console: Console, exps: list[dict[str, Any]]) -> None:
    noops = [r for r in exps if r["kind"] == "noop" and "error" not in r]
    effects = [r for r in exps if r["kind"] == "effect" and "error" not in r]
    t = Table(title="the issue's limits")
    for col in ("criterion", "measured", "limit", ""):
        t.add_column(col)
    false = [r for r in noops if r.get("verdict") in ("improved", "regressed")]

    def row(name: str, hits: int, n: int, limit: str, ok: bool) -> None:
        t.add_row(name, f"{hits}/{n} ({100 * hits / n:.0f}%)" if n else "-", limit,
                  "-" if not n else ("[green]PASS[/green]" if ok else "[red]FAIL[/red]"))

    n = len(noops)
    row("no-op called improved or regressed", len(false), n, "<= 1 in 20",
        n > 0 and len(false) <= LIMITS["false_calls"] * n)
    same = sum(r.get("verdict") == "same" for r in noops)
    row("no-op 'same'", same, n, ">= 80%", n > 0 and same >= LIMITS["noop_same"] * n)
    imp = sum(r.get("verdict") == "improved" for r in effects)
    row("effect 'improved'", imp, len(effects), ">= 90%",
        len(effects) > 0 and imp >= LIMITS["effect_improved"] * len(effects))
    console.print(t)
    for r in false:
        console.print(f"  false call: {r['name']} {r['verdict']} {_num(r['delta_pct'], '+.1f')}% "
                      f"CI {r['ci_pct']} windows {r['n_a']}+{r['n_b']}, hog on "
                      f"{_num(r.get('hog_on'), '.0%')} ({r.get('experiment_id')})", highlight=False)
    for r in exps:
        if "error" in r:
            console.print(f"  error: {r['kind']} {r['name']}: {r['error'][:300]}", highlight=False)


# ---- main ------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--lab-kind", choices=KINDS, default="vlab")
    ap.add_argument("--noops", type=int, default=20, help="live no-op experiments")
    ap.add_argument("--effects", type=int, default=10, help="live experiments of the ~10%% effect")
    ap.add_argument("--background", choices=["on", "off"], default="on")
    ap.add_argument("--out", type=Path, default=None, help="JSON lines, appended per experiment")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--clock", default=None, help="qlab: the guest clock (`qlab up --clock`)")
    ap.add_argument("--calibrate", action="store_true",
                    help="run the calibrate tool on the lab first, before the background starts")
    ap.add_argument("--decision", action="append", default=[], metavar="KEY=JSON",
                    help="set a [decision] key of the lab's profile for this run (repeatable), "
                    "e.g. --decision round_windows=1")
    ap.add_argument("--report", type=Path, nargs="+", default=None,
                    help="print the table of earlier runs' --out files and exit")
    args = ap.parse_args()
    console = Console(width=140)
    if args.report:
        for path in args.report:
            report(console, path)
        return
    out = args.out or Path(f"trust-{args.lab_kind}-{int(time.time())}.json")
    rng = random.Random(args.seed)
    kinds = ["noop"] * args.noops + ["effect"] * args.effects
    rng.shuffle(kinds)  # drift falls on both kinds alike
    root = Path(tempfile.mkdtemp(prefix="lw-trust-")) / args.lab_kind
    hog = Background(random.Random(args.seed + 1)) if args.background == "on" else None
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # as ^C: the hog killed, lab down
    before = {"loadavg": os.getloadavg(), "busy": _busy()}  # other work, before our lab is up
    try:
        with lab(args.lab_kind, root, args.clock, console) as profile:
            profile = with_decision(profile, args.decision)
            eff_name, eff_diff = effect_patch(args.lab_kind)
            plan: list[tuple[str, str, str | None]] = []
            for i, kind in enumerate(kinds):
                if kind == "noop":
                    line = f"/* labwarden trust bench: no-op {args.seed}-{i} */\n"
                    plan.append(("noop", f"noop-{args.seed}-{i}",
                                 comment_diff(profile, COMMENT_FILE[args.lab_kind], line)))
                else:
                    plan.append(("effect", eff_name, eff_diff))
            _append(out, {"type": "run", "lab_kind": args.lab_kind, "noops": args.noops,
                          "effects": args.effects, "background": args.background,
                          "seed": args.seed, "at": datetime.now(UTC).isoformat(),
                          "tree": _tree(), **before,
                          "decision": profile.decision.model_dump(mode="json")})
            console.print(f"{len(plan)} experiments on the {args.lab_kind} ({root}), background "
                          f"{args.background}; results appended to {out}")
            if args.calibrate:
                asyncio.run(calibrate(profile, out, console))
            if hog is not None:
                hog.start()
            asyncio.run(run_all(profile, plan, out, hog, console))
    except KeyboardInterrupt:  # ^C or SIGTERM: what was done is in --out; the table of it below
        console.print(f"[red]interrupted[/red]: the experiments done are in {out}")
    finally:
        if hog is not None:
            hog.stop()
            _append(out, {"type": "background", "switches": [[round(t, 1), on]
                                                             for t, on in hog.events]})
    if out.exists():
        report(console, out)


if __name__ == "__main__":
    main()
