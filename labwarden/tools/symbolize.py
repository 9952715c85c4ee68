"""symbolize: turn a measurement's perf.data into folded stacks, a flame graph and a hot-path tree.

Reads the DUT (system libraries, kallsyms) over SFTP, changes nothing there. perf script runs on
the host against a symfs of the build that ran plus the DUT's own libraries (fetched once, cached
by build-id; a build-id mismatch is never accepted). Returns the hot paths (total and self %),
the dominant path, unknown-frame %, stack depth, the share of named functions, and with a baseline
the top deltas and a differential flame graph. Always a per-thread breakdown (samples per
thread and per family: ksoftirqd/*, kworker/*, the target); a system-wide measurement's flame graph
has one tower per thread name, kernel threads included. Raw data stays in artifacts whose paths
are returned; results are cached by the perf.data hash.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import struct
from pathlib import Path

from pydantic import BaseModel, Field

from labwarden.core.devtext import quote
from labwarden.core.errors import ToolError
from labwarden.core.measurements import MeasurementRecord
from labwarden.core.paths import PathRefused, contained, is_regular_file, within
from labwarden.core.records import RecordNotFound, RecordStore
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.host import folded as fl
from labwarden.lab.host import symfs as sf
from labwarden.lab.host.binaries import which
from labwarden.lab.host.builds import load_manifest
from labwarden.results.symbolize import FunctionShare, SymbolizeOutput
from labwarden.tools.context import LabContext

FORMAT = 2
"""Version of the cached Symbolized JSON; bump when its fields or the pipeline change."""


class SymbolizeInput(ToolInput):
    profile_id: str = Field(description="a measurement's id (kind 'prof', from `measure`)",
                            examples=["prof-0123456789ab"])
    rep: int = Field(0, ge=0, le=9, description="which window's perf.data")
    baseline_profile_id: str | None = Field(None, description="compare against this measurement "
                                            "(top deltas + differential flame graph)")
    baseline_rep: int = Field(0, ge=0, le=9, description="the baseline's window")
    top: int = Field(25, ge=1, le=40, description="lines of the hot-path tree")
    functions: list[str] = Field(default_factory=list, max_length=20,
                                 description="symbols whose share to report (e.g. a patch's target)",
                                 examples=[["hal_get_all_stations_bulk"]])


class Symbolized(BaseModel):
    """What perf and inferno produced for one perf.data (cached as JSON, by its sha256)."""

    format: int = FORMAT
    key: str
    perf_data: str
    folded: str
    svg: str
    symfs: sf.Symfs
    perf_warnings: list[str]
    threads_folded: str | None = Field(None, description="system-wide: stacks per thread "
                                       "(`comm-PID/TID` first frames); `folded` merges them by comm")


def _bins(diff: bool) -> dict[str, str]:
    names = ["perf", "inferno-collapse-perf", "inferno-flamegraph"] + (
        ["inferno-diff-folded"] if diff else [])
    found = {n: which(n) for n in names}
    missing = [n for n, p in found.items() if p is None]
    if missing:
        raise ToolError("tool", f"not installed on this host: {', '.join(missing)}",
                        "make setup  (perf: apt-get install linux-perf; inferno: cargo install "
                        "inferno --locked --root .tools); `labwarden doctor` checks both")
    return {n: p for n, p in found.items() if p}


def _load(store: RecordStore, pid: str, rep: int) -> tuple[MeasurementRecord, Path]:
    try:
        rec = store.load("prof", pid, MeasurementRecord)
    except RecordNotFound as exc:
        raise ToolError("invalid_input", f"profile_id: {exc.problem}", exc.remedy) from exc
    window = next((w for w in rec.windows if w.rep == rep), None)
    if window is None or not window.perf_data:
        with_perf = [w.rep for w in rec.windows if w.perf_data]
        raise ToolError("invalid_input", f"rep: {pid} has no perf.data for rep {rep}",
                        f"reps with perf.data: {with_perf or 'none (measure with perf=true)'}")
    path = Path(window.perf_data)
    raw = str(path if path.is_absolute() else store.artifact(pid) / path)
    path = contained(raw, [store.artifact(pid)], what="profile_id")  # the record's own artifacts
    if not is_regular_file(path):
        raise ToolError("invalid_input", f"rep: perf.data of {pid} rep {rep} is gone ({path})",
                        "measure again")
    return rec, path


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def content_key(perf_data: Path, memo_file: Path) -> str:
    """sha256 of perf.data (the cache key), memoised by (device, inode, size, mtime): hashing a
    60 s perf.data takes ~70 ms here, more than the whole cached answer may."""
    st = perf_data.stat()
    ident = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]
    try:
        memo = json.loads(memo_file.read_text())
    except (OSError, ValueError):
        memo = {}
    hit = memo.get(str(perf_data))
    if isinstance(hit, dict) and hit.get("stat") == ident:
        return str(hit["sha256"])
    digest = _sha256(perf_data)
    memo[str(perf_data)] = {"stat": ident, "sha256": digest}
    memo_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo_file.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(memo))
    tmp.replace(memo_file)
    return digest


async def symbolized(ctx: LabContext, rec: MeasurementRecord, perf_data: Path,
                     bins: dict[str, str]) -> tuple[Symbolized, bool]:
    """The folded stacks + SVG of one perf.data: from the cache, or made now. (result, cached)"""
    base = ctx.data_dir / "symbolized"
    key = (await asyncio.to_thread(content_key, perf_data, base / "sha256-memo.json"))[:16]
    index = within(base, f"{key}.json", what="symbolize key")
    if is_regular_file(index):
        try:
            hit = Symbolized.model_validate_json(index.read_text())
            files = [contained(f, [base / key], what="symbolize key")
                     for f in (hit.folded, hit.svg, *filter(None, [hit.threads_folded]))]
            if hit.format == FORMAT and all(is_regular_file(f) for f in files):
                return hit, True
        except (ValueError, PathRefused):
            pass  # unreadable, old, or pointing out of its directory: make it again
    out = base / key
    out.mkdir(parents=True, exist_ok=True)
    warnings: list[str] = []
    kallsyms = Path(rec.kallsyms) if rec.kallsyms else None
    if kallsyms is None or not kallsyms.is_file():
        kallsyms = out / "kallsyms"
        res = await ctx.device.exec(["cat", "/proc/kallsyms"], timeout=60, cap=64 << 20)
        if res.exit_status != 0:
            raise ToolError("device", f"cannot read /proc/kallsyms: {quote(res.stderr)}",
                            "kernel frames need the DUT's kallsyms: check root on the DUT")
        kallsyms.write_text(res.stdout)
        warnings.append("kallsyms read now, not at record time: wrong if the DUT rebooted since")
    await ctx.report(1, 4, "reading the recorded mappings and build-ids")
    try:
        dsos = await asyncio.to_thread(sf.recorded_dsos, perf_data)
    except (RuntimeError, ValueError, OSError, struct.error) as exc:
        raise ToolError("tool", str(exc), "is the file a perf.data? measure again") from exc
    empty = out / "buildid-empty"
    empty.mkdir(exist_ok=True)
    if rec.system_wide:  # every process's mappings were recorded: fetch only what samples touch
        try:
            sampled = await asyncio.to_thread(sf.sampled_dsos, bins["perf"], perf_data, kallsyms, empty)
        except RuntimeError as exc:
            raise ToolError("tool", str(exc), "is the file a perf.data? measure again") from exc
        warnings.append(f"system-wide: symbols for the {sum(d.path in sampled for d in dsos)} DSOs "
                        f"the samples touch (of {len(dsos)} mapped)")
        dsos = [d for d in dsos if d.path in sampled]
    manifest = load_manifest(ctx.profile, rec.build_id) if rec.build_id else None
    if manifest is None:
        warnings.append("the measurement names no verified build: symbols come from the DUT only")
    await ctx.report(2, 4, f"assembling the symfs ({len(dsos)} DSOs)")
    symfs = await sf.assemble(ctx.device, dsos, out / "symfs", ctx.data_dir / "symcache",
                              manifest, kallsyms)
    if not symfs.buildids_recorded:
        warnings.append("perf.data holds no build-ids (perf 6.1 drops them with -z unless "
                        "--buildid-mmap): symfs files taken by path, unverified")
    folded, svg, err = out / "stacks.folded", out / "flame.svg", out / "perf-script.stderr"
    per_thread = out / "threads.folded" if rec.system_wide else None
    argv = sf.script_argv(bins["perf"], perf_data, Path(symfs.root), kallsyms, empty)
    await ctx.report(3, 4, "perf script | inferno-collapse-perf")
    title = (f"system-wide @{rec.stations} stations ({rec.id})" if rec.system_wide else
             f"{rec.target_pid} @{rec.stations} stations ({rec.id})")
    try:
        if per_thread is not None:  # one pass per thread, then merged by comm for the graph
            await asyncio.to_thread(sf.collapse, argv, bins["inferno-collapse-perf"], per_thread,
                                    err, ["--tid"])
            merged = fl.by_comm(await asyncio.to_thread(fl.Folded.read, per_thread))
            await asyncio.to_thread(folded.write_text, merged.text())
        else:
            await asyncio.to_thread(sf.collapse, argv, bins["inferno-collapse-perf"], folded, err)
        await asyncio.to_thread(sf.flamegraph, bins["inferno-flamegraph"], folded, svg, title)
    except RuntimeError as exc:
        raise ToolError("tool", str(exc), f"see {err}") from exc
    perf_warn = [ln[:200] for ln in err.read_text(errors="replace").splitlines() if ln.strip()][-5:]
    result = Symbolized(key=key, perf_data=str(perf_data), folded=str(folded), svg=str(svg),
                        symfs=symfs, perf_warnings=warnings + perf_warn,
                        threads_folded=str(per_thread) if per_thread else None)
    tmp = index.with_suffix(".tmp")
    tmp.write_text(result.model_dump_json(indent=1))
    tmp.replace(index)  # written last: marks the entry complete
    return result, False


async def run(ctx: LabContext, inp: SymbolizeInput) -> SymbolizeOutput:
    bins = _bins(diff=inp.baseline_profile_id is not None)
    store = RecordStore(ctx.data_dir)
    rec, perf_data = _load(store, inp.profile_id, inp.rep)
    sym, cached = await symbolized(ctx, rec, perf_data, bins)
    new = await asyncio.to_thread(fl.Folded.read, Path(sym.folded))
    if new.samples == 0:
        raise ToolError("tool", f"no samples in {perf_data} after perf script",
                        f"see {Path(sym.folded).parent / 'perf-script.stderr'}")
    st = fl.stats(new)
    per_thread = new if sym.threads_folded is None else await asyncio.to_thread(
        fl.Folded.read, Path(sym.threads_folded))
    thread_shares, groups = fl.threads(per_thread)
    deltas: list[fl.Delta] = []
    diff_svg = baseline_svg = None
    if inp.baseline_profile_id:
        brec, bdata = _load(store, inp.baseline_profile_id, inp.baseline_rep)
        bsym, bcached = await symbolized(ctx, brec, bdata, bins)
        base = await asyncio.to_thread(fl.Folded.read, Path(bsym.folded))
        # absolute change (pp of one core): each window's share x its measured target CPU; a
        # system-wide recording's shares are of every CPU's samples, so only shares there
        cpu = [next((w.cpu_pct for w in r.windows if w.rep == rep), None)
               for r, rep in ((brec, inp.baseline_rep), (rec, inp.rep))]
        if rec.system_wide or brec.system_wide:
            cpu = [None, None]
        deltas = fl.top_deltas(base, new, 12, base_cpu=cpu[0], new_cpu=cpu[1])
        diff = Path(sym.folded).parent / f"diff-{bsym.key}.svg"
        if not diff.is_file():
            cached = False
            try:
                data = await asyncio.to_thread(sf.diff_folded, bins["inferno-diff-folded"],
                                               Path(bsym.folded), Path(sym.folded))
                await asyncio.to_thread(sf.flamegraph, bins["inferno-flamegraph"], data, diff,
                                        f"{brec.id} -> {rec.id} (red: grew)")
            except RuntimeError as exc:
                raise ToolError("tool", str(exc), "check the two folded files") from exc
        cached = cached and bcached
        diff_svg, baseline_svg = str(diff), bsym.svg
    shares = fl.function_shares(new, inp.functions)
    where = await asyncio.to_thread(sf.defining_dso, sym.symfs, inp.functions) \
        if inp.functions else {}
    await ctx.report(4, 4, "symbolized" + (" (cached)" if cached else ""))
    return SymbolizeOutput(
        profile_id=rec.id, rep=inp.rep, stations=rec.stations, key=sym.key, samples=new.samples,
        unknown_pct=st.unknown_pct, unknown_frames_pct=st.unknown_frames_pct,
        stacks_with_unknown_pct=st.stacks_with_unknown_pct, unresolved_top=st.unresolved_top,
        depth=st.depth, system_wide=rec.system_wide, threads=thread_shares, thread_groups=groups,
        dominant_path=fl.dominant_path(new, 24), tree=fl.tree_lines(new, inp.top),
        functions=[FunctionShare(name=n[:120], total_pct=t, self_pct=s, defined_in=where.get(n))
                   for n, (t, s) in shares.items()],
        baseline_profile_id=inp.baseline_profile_id, top_deltas=deltas, folded=sym.folded,
        svg=sym.svg, diff_svg=diff_svg, baseline_svg=baseline_svg, symfs=sym.symfs.root,
        buildids_recorded=sym.symfs.buildids_recorded, symfs_missing=sym.symfs.missing[:10],
        warnings=sym.perf_warnings[:8], cached=cached)


SPEC = ToolSpec(name="symbolize", description=describe(__doc__),
                input=SymbolizeInput, output=SymbolizeOutput, run=run, effect="read_only",
                idempotent=True, budget_class="cheap")
