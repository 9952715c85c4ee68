"""measure: measure the target at a workload point (N clients or streams; 0 on a DUT without a
load) -- per rep, a perf record, a 1 Hz sampler (CPU from the target's threads' run time in ns,
else utime+stime ticks; RSS, IO) and the lab profile's uprobe counters (calls/s of each probed
function), all running on the DUT at once; every window stores its conditions, the clock of its
CPU figure and the DUT's kernel CPU split per core. `system_wide` perf-records every CPU with
kernel stacks.

The split: user/system/irq/softirq per core from /proc/stat and softirq counts (NET_RX, ...) from
/proc/softirqs, at the window's start and end. System-wide, the flame graph holds the kernel
threads and softirqs that carry packets (ksoftirqd/N, kworkers), not only the target.

perf samples say where; counters say how often and how much. Raw data (perf.data, kallsyms)
stays in artifacts; the result is a summary with the measurement's id (`profile_id`, `prof-`:
the names stored records have always used) for `symbolize`.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

from pydantic import Field

from labwarden.core.devtext import quote
from labwarden.core.errors import ToolError
from labwarden.core.kernelsplit import KernelSplit, KernelSummary
from labwarden.core.measurements import MAX_REPS, MeasurementRecord, Window
from labwarden.core.records import RecordStore
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab import features, perfcount, workload
from labwarden.lab.conditions import snapshot
from labwarden.lab.drivers import load as load_drivers
from labwarden.lab.dut import datamodel, kstat, procs, sampler, uprobes
from labwarden.lab.dut.commands import RunResult
from labwarden.lab.dut.jobs import DutJobs
from labwarden.lab.host.builds import load_manifest
from labwarden.results.measure import CpuSummary, MeasureOutput
from labwarden.tools.context import LabContext

PERF_RECORD = ["record", "-N", "-z", "--buildid-mmap", "--no-bpf-event", "-e", "cpu-clock",
               "-F", "999", "--call-graph", "dwarf,32768"]
"""FACTS: -z is ~46x smaller; never -B. With -N -z, perf 6.1 writes no build-id table, so
--buildid-mmap puts the ids in the mmap events: a mismatched symfs is then refused.
--no-bpf-event: without it perf 6.1 spends ~0.95 s per recording on its BPF event support
(--synth=no does not remove it): 1.13 s -> 0.18 s of fixed cost per window, measured on the
vlab. The target is a user-space daemon, and symbolize's unknown-frame share stays 0% without
BPF symbols (bench/symbolize.py)."""

PERF_RECORD_SYSTEM = ["record", "-N", "-z", "--buildid-mmap", "--no-bpf-event", "-e", "cpu-clock",
                      "-F", "999", "-a", "-g"]
"""System-wide: every CPU (`-a`) with frame-pointer call chains (`-g`), which the kernel unwinds
itself -- softirq, ksoftirqd and kworker stacks are kernel stacks. DWARF copies of 32 KiB per
sample on every CPU would be far bigger and add nothing there; user frames of processes built
without frame pointers stay shallow."""


class MeasureInput(ToolInput):
    stations: int = Field(ge=0, le=4096, description="clients held during the windows", examples=[114])
    window_s: float = Field(10, ge=2, le=300, description="seconds per window", examples=[10])
    reps: int = Field(3, ge=1, le=MAX_REPS, description="windows (repetitions)")
    perf: bool = Field(True, description="perf record the target (symbolize needs it)")
    perf_reps: int | None = Field(None, ge=0, le=10, description="record perf in the first N reps only "
                                  "(default: all)")
    uprobes: bool = Field(True, description="count the lab profile's uprobe functions")
    system_wide: bool = Field(False, description="perf records every CPU with kernel stacks "
                              "(`perf record -a -g`): the kernel threads and softirqs that carry "
                              "packets, not only the target; the target's 1 Hz sampler still runs")
    settle_s: float | None = Field(None, ge=0, le=60, description="seconds from associating to "
                                   "the first window; the set-up runs within it (default: [load] "
                                   "settle_s of the lab profile)")
    hold: bool = Field(True, description="hold the workload first (associate `stations`); false: "
                       "the caller already holds it (a sweep, an A/B)")
    idle: bool = Field(False, description="the windows run with the load stopped (a sweep's idle "
                       "baseline): recorded as an idle measurement")


async def measure(ctx: LabContext, inp: MeasureInput) -> MeasurementRecord:
    """The windows themselves."""
    prof, dev = ctx.profile, ctx.device
    kind = "idle" if inp.idle else "loaded"
    if inp.hold and features.missing(prof, "clients") is None:  # a lab without clients
        await ctx.call("associate", {"stations": inp.stations})   # measures its own workload
    # The settle is time since the clients associated (their first syncs stay out of the
    # windows); the set-up below (kernel symbols, uprobes) runs inside it, not after it.
    settle = prof.load.settle_s if inp.settle_s is None else inp.settle_s
    settled_at = time.monotonic() + settle
    proc = await procs.instance(dev, prof.target.process, prof.target.pidfile(prof.target.process))
    if proc is None:
        raise ToolError("device", f"{prof.target.process} is not running on the DUT",
                        "lab_status; the process manager should respawn it")
    store = RecordStore(ctx.data_dir)
    pid = store.new_id("prof")
    art = store.artifact_dir(pid)
    perf_reps = inp.reps if inp.perf_reps is None else inp.perf_reps
    kallsyms = None
    if inp.perf and perf_reps:
        kallsyms = str(art / "kallsyms")
        # procfs reports size 0, so SFTP reads nothing: stream it through cat instead
        res = await dev.exec(["cat", "/proc/kallsyms"], timeout=60, cap=64 << 20)
        if res.exit_status != 0 or res.truncated:
            raise ToolError("device", f"cannot read /proc/kallsyms: {quote(res.stderr)}",
                            "symbolize needs kernel symbols: run as root on the DUT")
        Path(kallsyms).write_text(res.stdout)
    probes = await _probe_targets(ctx, prof.target.uprobes, proc.pid) if inp.uprobes else {}
    notes: list[str] = []
    if probes:
        if "uprobes" not in ctx.facts:  # asked once a session: a wedged tracefs costs a timeout
            ctx.facts["uprobes"] = await uprobes.dut_available(dev, prof.dut.paths.tracefs)
        reason = ctx.facts["uprobes"]
        if reason:  # CPU and perf still measure; the counters are said to be missing, and why
            notes.append(f"uprobe counters not measured: {reason}")
            probes = {}
    windows: list[Window] = []
    counting: list[asyncio.Task[RunResult] | None] = []  # each window's perf stat, in order
    try:
        # the jobs block ends first: on a failure or cancel every perf, perf stat and sampler of
        # this measurement is stopped on the DUT (no SIGHUP is relied on) before the probes
        # they hold are removed -- tracefs refuses to remove an event that is still open
        where = load_drivers.label(load_drivers.for_profile(prof, dev), inp.stations)
        async with _maybe_probes(ctx, probes) as events, \
                DutJobs(dev, prof.dut.paths.tmp, shield=ctx.shielded) as jobs:
            try:
                await asyncio.sleep(max(0.0, settled_at - time.monotonic()))
                for rep in range(inp.reps):
                    _raise_failed_count(counting, inp.window_s)  # stop early, not after all reps
                    await ctx.report(rep, inp.reps, f"{where}: window {rep + 1}/"
                                     f"{inp.reps} ({inp.window_s:g} s)")
                    windows.append(await _window(ctx, inp, proc.pid, rep, events, counting,
                                                 perf=inp.perf and rep < perf_reps, art=art,
                                                 jobs=jobs, notes=notes))
                for window, stat in zip(windows, counting, strict=True):
                    if stat is not None:
                        window.counters = _counters(await stat, inp.window_s)
            finally:
                await _reap(counting)
    except BaseException:
        shutil.rmtree(art, ignore_errors=True)  # no record, so no orphan artifacts either
        raise
    record = MeasurementRecord(id=pid, stations=inp.stations, window_s=inp.window_s, kind=kind,
                           build_id=ctx.state.verified_build if ctx.state.fingerprint_ok() else None,
                           target_pid=proc.pid, windows=windows, kallsyms=kallsyms,
                           system_wide=inp.system_wide and kallsyms is not None,  # perf recorded
                           uprobes={c: f"{b}:{f}" for c, (b, f) in probes.items()},
                           notes=notes)
    store.save("prof", pid, record)
    await ctx.report(inp.reps, inp.reps, f"measurement {pid} stored")
    return record


class _NoProbes:
    async def __aenter__(self) -> list[str]:
        return []

    async def __aexit__(self, *exc: object) -> None:
        return None


def _maybe_probes(ctx: LabContext,
                  probes: dict[str, tuple[str, str]]) -> contextlib.AbstractAsyncContextManager[list[str]]:
    if not probes:
        return _NoProbes()
    prof = ctx.profile
    roots = []
    state = ctx.peek_state()
    if state.fingerprint_ok() and state.verified_build:  # the running build's symbols
        with contextlib.suppress(ToolError):
            roots.append(Path(load_manifest(ctx.profile, state.verified_build).symfs))
    return uprobes.registered(ctx.device, prof.dut.paths.tracefs, probes,
                              ctx.data_dir / "symcache", roots, shield=ctx.shielded)


async def _probe_targets(ctx: LabContext, probes: dict[str, str], pid: int) -> dict[str, tuple[str, str]]:
    """counter -> (DUT binary, function): `/path:function` names its binary; a bare function is
    in [target] library, or else in the target's own executable."""
    out: dict[str, tuple[str, str]] = {}
    exe: str | None = None
    for counter, spec in probes.items():
        if spec.startswith("/") and ":" in spec:
            binary, func = spec.rsplit(":", 1)
        else:
            binary, func = ctx.profile.target.library or "", spec
            if not binary:
                if exe is None:
                    exe = (await ctx.device.run(["readlink", f"/proc/{pid}/exe"])).stdout.strip()
                binary = exe
        if not binary or not func:
            raise ToolError("invalid_input", f"uprobe {counter} = {spec!r}: no binary or function",
                            "name a function (`NAME = \"FUNCTION\"`) or "
                            "`NAME = \"/dut/path/of/binary:FUNCTION\"` in [target] uprobes")
        out[counter] = (binary, func)
    return out


def _counters(stat: RunResult, window_s: float) -> dict[str, float]:
    counts = perfcount.parse_perf_stat_csv(stat.stderr)
    if stat.exit_status != 0 or not counts:
        raise ToolError("device", f"perf stat of uprobes failed: {quote(stat.stderr)}",
                        "is tracefs mounted on the DUT? `labwarden doctor`")
    return {uprobes.counter_name(e): round(c / window_s, 3) for e, c in counts.items()}


def _raise_failed_count(counting: list[asyncio.Task[RunResult] | None], window_s: float) -> None:
    """Raise now if an earlier window's perf stat has already ended badly."""
    for stat in counting:
        if stat is not None and stat.done():
            _counters(stat.result(), window_s)


async def _reap(counting: list[asyncio.Task[RunResult] | None]) -> None:
    """Cancel the perf stats still running (a failed or cancelled measurement), and wait for all
    of them (a cancelled exec only closes its session: the perf stat itself is stopped on the
    DUT by the measurement's DutJobs)."""
    running = [t for t in counting if t is not None]
    for stat in running:
        stat.cancel()  # no-op for those already done
    await asyncio.gather(*running, return_exceptions=True)


async def _kstat(ctx: LabContext, notes: list[str]) -> kstat.KstatSnapshot | None:
    """A snapshot, or None (and a note, once): the window's other measurements stand without it."""
    snap, why = await kstat.snapshot_or_reason(ctx.device)
    if why and (note := f"kernel CPU split not measured: {why}") not in notes:
        notes.append(note)
    return snap


def _split(before: kstat.KstatSnapshot | None, after: kstat.KstatSnapshot | None,
           notes: list[str]) -> KernelSplit | None:
    if before is None or after is None:
        return None
    try:
        return kstat.delta(before, after)
    except ValueError as exc:  # the DUT rebooted within the window
        notes.append(f"kernel CPU split not measured: {exc}")
        return None


def perf_record_argv(perf: str, system_wide: bool, pid: int, out: str, seconds: str) -> list[str]:
    """The window's perf record: the target's process with DWARF stacks, or every CPU."""
    scope = [*PERF_RECORD_SYSTEM] if system_wide else [*PERF_RECORD, "-p", str(pid)]
    return [perf, *scope, "-o", out, "--", "sleep", seconds]


async def _window(ctx: LabContext, inp: MeasureInput, pid: int, rep: int, events: list[str],
                  counting: list[asyncio.Task[RunResult] | None], perf: bool, art: Path,
                  jobs: DutJobs, notes: list[str]) -> Window:
    """One window: the sampler and perf record are awaited; the uprobe counters' perf stat is
    started with them and appended to `counting`, for measure() to collect. Opening and closing
    a uprobe perf event costs ~0.1 s of kernel waits each, so waiting for it here would add
    ~0.2 s to every window; instead it closes while the next window runs (its counts cover its
    own window_s, started with this window: bench/loop_overhead.py)."""
    prof, dev = ctx.profile, ctx.device
    start_count = await datamodel.total(dev, prof)
    perf_opts = " ".join(PERF_RECORD_SYSTEM if inp.system_wide else PERF_RECORD) if perf else None
    cond = await snapshot(dev, prof, ctx.state, inp.stations if start_count is None else start_count,
                          perf=perf_opts)
    secs = f"{inp.window_s:g}"
    # in the jobs' dir: a failed or cancelled window's perf.data goes with it, after its perf
    # was stopped (removing it earlier races a perf that is still starting and creates it)
    remote = f"{jobs.dir}/lw-{art.name}-rep{rep}.perf.data"
    timeout = inp.window_s + 60
    k_start = await _kstat(ctx, notes)
    # 1 MiB: a line of stat and one of each thread's run time per second (a 300 s window of a
    # 20-thread target prints ~200 kB)
    running = [jobs.exec(f"sampler{rep}", sampler.argv(pid, int(inp.window_s) + 1), timeout=timeout,
                         cap=1 << 20)]
    if perf:
        running.append(jobs.exec(f"record{rep}", perf_record_argv(
            prof.target.perf, inp.system_wide, pid, remote, secs), timeout=timeout))
    started = datetime.now(UTC)
    t0 = time.monotonic()
    counting.append(asyncio.ensure_future(jobs.exec(
        f"stat{rep}", [prof.target.perf, *perfcount.perf_stat_argv(events, pid, inp.window_s)[1:]],
        timeout=timeout)) if events else None)
    results = await asyncio.gather(*running)
    duration = time.monotonic() - t0
    kernel = _split(k_start, await _kstat(ctx, notes), notes)
    sampled = sampler.parse(results[0].stdout)
    if len(sampled.samples) < 2:
        raise ToolError("device", f"the sampler got {len(sampled.samples)} samples of pid {pid}"
                        + (" (the process exited)" if sampled.gone else ""),
                        "lab_status: is the target running?")
    perf_path, perf_bytes = None, None
    if perf:
        rec = results[1]
        try:
            if rec.exit_status != 0:
                raise ToolError("device", f"perf record failed: {quote(rec.stderr)}",
                                "`labwarden doctor` on the DUT side: perf installed, root?")
            local = art / f"rep{rep}.perf.data"
            await dev.get(remote, local)
            perf_path, perf_bytes = str(local), local.stat().st_size
        finally:  # shielded, as above: also when cancelled during the download
            await ctx.shielded(dev.run(["rm", "-f", remote]))
    end_count = await datamodel.total(dev, prof)
    clk = cond.clk_tck or 100
    cpu = sampled.cpu(clk, prof.target.cpu_clock)
    if cpu.fallback and not sampled.restarted() \
            and (note := f"CPU from ticks, not schedstat ns: {cpu.fallback}") not in notes:
        notes.append(note)  # a restart is said by the window's `restarted` and a warning
    return Window(rep=rep, started_at=started, duration_s=round(duration, 3),
                  cpu_pct=round(cpu.mean, 3) if cpu.mean is not None else 0.0,
                  cpu_series=[round(x, 2) for x in cpu.series],
                  cpu_clock=cpu.clock, resolution_pct=cpu.resolution_pct,
                  wait_pct=None if (w := sampled.wait_pct()) is None else round(w, 2),
                  rss_kb=sampled.rss_kb(),
                  io_read_bytes=sampled.samples[-1].read_bytes - sampled.samples[0].read_bytes,
                  io_write_bytes=sampled.samples[-1].write_bytes - sampled.samples[0].write_bytes,
                  datamodel_start=start_count, datamodel_end=end_count,
                  restarted=sampled.restarted() or sampled.gone, perf_data=perf_path,
                  perf_bytes=perf_bytes, kernel=kernel, conditions=cond)


def summarize(record: MeasurementRecord) -> MeasureOutput:
    vals = record.cpu_values()
    warnings = list(record.notes)
    if any(w.restarted for w in record.windows):
        warnings.append("the target restarted during a window: its CPU is not comparable")
    if any(w.datamodel_end not in (None, record.stations) for w in record.windows):
        warnings.append("clients were lost during a window (datamodel count changed)")
    names = sorted({k for w in record.windows for k in w.counters})
    perf_sizes = [w.perf_bytes / w.duration_s for w in record.windows if w.perf_bytes]
    return MeasureOutput(
        profile_id=record.id, stations=record.stations,
        cpu_pct=CpuSummary(mean=round(statistics.fmean(vals), 3),
                           stdev=round(statistics.stdev(vals), 3) if len(vals) > 1 else 0.0,
                           samples=sum(len(w.cpu_series) + 1 for w in record.windows),
                           per_rep=[round(v, 3) for v in vals]),
        counters={n: round(statistics.fmean(w.counters.get(n, 0.0) for w in record.windows), 3)
                  for n in names},
        rss_kb=int(statistics.median(w.rss_kb for w in record.windows)),
        pinned=all(w.conditions.pinned() for w in record.windows),
        fingerprint_verified=all(w.conditions.fingerprint_verified for w in record.windows),
        perf_bytes_per_s=round(statistics.fmean(perf_sizes)) if perf_sizes else None,
        system_wide=record.system_wide,
        kernel=KernelSummary.of([w.kernel for w in record.windows if w.kernel is not None]),
        warnings=warnings)


async def run(ctx: LabContext, inp: MeasureInput) -> MeasureOutput:
    return summarize(await measure(ctx, inp))


def _precheck(ctx: LabContext, inp: MeasureInput) -> None:
    workload.check(ctx.profile, "stations", [inp.stations])  # only points the load can hold


SPEC = ToolSpec(name="measure", description=describe(__doc__), input=MeasureInput,
                output=MeasureOutput, run=run, effect="mutates_dut",
                requires=frozenset({"lease", "board_healthy", "fingerprint_verified", "env_pinned",
                                    "topology_asserted"}),
                budget_class="measure", measures=True, precheck=_precheck)
