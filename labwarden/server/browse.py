"""What `resources/list` shows: concrete resources for what the lab holds now -- the lab status,
the record lists, the latest records, the reports and the flame graphs -- so a client that only
browses (Claude Desktop, the MCP Inspector) has something to open. Each names what it is (a
sweep's label, densities and build; a measurement's stations); newest first, bounded in count.

Read from the lab's data dir at each listing (`list_resources()` has no request context: the
server serves one lab, so the dir is known when it is built). Every file listed is resolved
(symlinks followed) and inside the data dir; anything else is left out.
"""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime
from pathlib import Path

from mcp.types import Annotations, Resource

from labwarden.core.devtext import clean
from labwarden.core.measurements import MeasurementRecord, SweepRecord
from labwarden.core.paths import PathRefused, contained, is_regular_file
from labwarden.core.records import RecordStore, RecordUnreadable, parse_record

LATEST = 20
"""Records of each kind, reports and symbolize results listed (the newest)."""
DIFFS_PER_FLAME = 4
"""Differential flame graphs listed per symbolize result (the newest)."""

KINDS = {"profiles": "prof", "sweeps": "swp"}
"""URI kind -> record store kind."""
FILE_TYPES = {".svg": "image/svg+xml", ".folded": "text/plain", ".txt": "text/plain",
              ".json": "application/json", ".html": "text/html", ".md": "text/markdown"}
"""Text files served as resources, by suffix."""
FILE_URIS = ("labwarden://symbolized/", "labwarden://artifacts/", "labwarden://reports/")
"""URI prefixes whose last segment is a file name: the file's suffix gives the MIME type."""
_KEY = re.compile(r"[0-9a-f]{16}")
_TITLE = re.compile(r"<title>(.*?)</title>", re.S | re.I)

STATIC = [
    Resource(uri="labwarden://lab/status", name="lab-status", title="lab status",
             description="The lab right now: board health, the running image and whether it is "
             "verified, knobs, clients, what is not ready (runs lab_status: read-only, guarded "
             "and logged).", mime_type="application/json"),
    *(Resource(uri=f"labwarden://records/{kind}", name=f"{kind}-list", title=f"all {kind}",
               description=f"Ids of every stored {kind[:-1]} record, oldest first.",
               mime_type="application/json") for kind in KINDS),
    Resource(uri="labwarden://patches/index", name="patches", title="submitted patches",
             description="Every patch submitted with patch_submit: id, name, files, base, the "
             "session that wrote it, its build; labwarden://patches/ID adds the diff.",
             mime_type="application/json"),
]


def file_mime(uri: str) -> str | None:
    """The MIME type of a file resource, from its suffix (None: not a file URI)."""
    if not uri.startswith(FILE_URIS):
        return None
    return FILE_TYPES.get(Path(uri.rsplit("/", 1)[-1]).suffix)


def inside(data_dir: Path, path: Path) -> Path | None:
    """`path` resolved, if it is a regular file inside `data_dir` (by path component, after
    following every symlink); None otherwise."""
    try:
        real = contained(str(path), [data_dir])
    except PathRefused:
        return None
    return real if is_regular_file(real) else None


def browse(data_dir: Path) -> list[Resource]:
    """Every concrete resource to list now, static ones first."""
    return [*STATIC, *_records(data_dir, "sweeps"), *_records(data_dir, "profiles"),
            *_reports(data_dir), *_flames(data_dir)]


def _newest(files: list[Path], data_dir: Path, limit: int) -> list[tuple[Path, Path, float, int]]:
    """Up to `limit` of `files` that are inside the data dir, newest first: (as named,
    resolved, mtime, size). URIs use the name; the read resolves it again."""
    stamped = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        stamped.append((st.st_mtime, f))
    out = []
    for mtime, f in sorted(stamped, key=lambda x: x[0], reverse=True):
        real = inside(data_dir, f)
        if real is not None:
            out.append((f, real, mtime, real.stat().st_size))
            if len(out) == limit:
                break
    return out


def _when(mtime: float) -> str:
    return datetime.fromtimestamp(mtime, UTC).isoformat(timespec="seconds")


def _records(data_dir: Path, kind: str) -> list[Resource]:
    store = RecordStore(data_dir)
    code = KINDS[kind]
    files = [f for f in (store.root / code).glob(f"{code}-*.json")
             if re.fullmatch(rf"{code}-[0-9a-f]{{12}}", f.stem)]
    out = []
    for f, real, mtime, size in _newest(files, data_dir, LATEST):
        rid = f.stem
        try:
            text = real.read_text()
            title, desc = (_sweep(parse_record(text, SweepRecord, real)) if code == "swp"
                           else _profile(parse_record(text, MeasurementRecord, real)))
        except (OSError, RecordUnreadable):
            title, desc = f"{kind[:-1]} {rid}", "a record this labwarden cannot read"
        out.append(Resource(uri=f"labwarden://records/{kind}/{rid}", name=rid, title=title,
                            description=desc, mime_type="application/json", size=size,
                            annotations=Annotations(last_modified=_when(mtime))))
    return out


def _build(build_id: str | None) -> str:
    return f"build {build_id}" if build_id else "no verified build"


def _sweep(rec: SweepRecord) -> tuple[str, str]:
    densities = "/".join(str(p.stations) for p in rec.points) or "no points"
    label = f"'{clean(rec.label, 64)}'" if rec.label else rec.id
    cpu = " -> ".join(f"{p.cpu_mean:.1f}%" for p in rec.points)
    unit = f"{densities} {rec.axis}" if rec.axis else "its own workload"
    return (f"sweep {label}: {unit}, {_build(rec.build_id)}",
            f"Sweep {rec.id} started {rec.started_at:%Y-%m-%d %H:%M} UTC: {rec.reps} x "
            f"{rec.window_s:g} s windows per density; target CPU (% of one core) {cpu}.")


def _profile(rec: MeasurementRecord) -> tuple[str, str]:
    cpu = rec.cpu_values()
    mean = f"{sum(cpu) / len(cpu):.1f}%" if cpu else "n/a"
    perf = sum(1 for w in rec.windows if w.perf_data)
    return (f"measurement {rec.id}: {rec.stations} stations ({rec.kind}), {_build(rec.build_id)}",
            f"{len(rec.windows)} window(s) of {rec.window_s:g} s at {rec.stations} stations; "
            f"target CPU {mean} of one core; {perf} perf.data recorded.")


def _reports(data_dir: Path) -> list[Resource]:
    out = []
    for f, real, mtime, size in _newest(list((data_dir / "reports").glob("*.html")), data_dir,
                                        LATEST):
        name = f.name
        try:
            with real.open(errors="replace") as page:
                head = page.read(4096)
        except OSError:
            continue
        found = _TITLE.search(head)
        title = clean(html.unescape(found.group(1)).strip(), 120) if found else f.stem
        out.append(Resource(uri=f"labwarden://reports/{name}", name=f"report-{f.stem}",
                            title=f"report: {title}", mime_type="text/html", size=size,
                            description=f"Self-contained HTML report {name} (curves, A/B deltas, "
                            "flame graphs, conditions, gates, cost).",
                            annotations=Annotations(last_modified=_when(mtime))))
    return out


def _flames(data_dir: Path) -> list[Resource]:
    base = data_dir / "symbolized"
    index = [f for f in base.glob("*.json") if _KEY.fullmatch(f.stem)]
    out = []
    for f, real, _, _ in _newest(index, data_dir, LATEST):
        key = f.stem
        profile = _profile_of(data_dir, real)
        svg = base / key / "flame.svg"
        if inside(data_dir, svg) is not None:
            out.append(_svg(key, svg, f"flame graph of {profile}",
                            f"Flame graph (inferno) of measurement {profile}, perf.data key {key}: "
                            "width is CPU time; click to zoom."))
        for diff, _, _, _ in _newest(list((base / key).glob("diff-*.svg")), data_dir,
                                     DIFFS_PER_FLAME):
            bkey = diff.stem.removeprefix("diff-")
            before = _profile_of(data_dir, base / f"{bkey}.json") if _KEY.fullmatch(bkey) else "?"
            out.append(_svg(key, diff, f"differential flame graph {before} -> {profile}",
                            f"Differential flame graph: the shape of measurement {profile}, coloured "
                            f"by the change from {before} (red grew, blue shrank)."))
    return out


def _svg(key: str, path: Path, title: str, description: str) -> Resource:
    st = path.stat()
    return Resource(uri=f"labwarden://symbolized/{key}/{path.name}", name=f"{key}-{path.stem}",
                    title=title, description=description, mime_type="image/svg+xml",
                    size=st.st_size, annotations=Annotations(last_modified=_when(st.st_mtime)))


def _profile_of(data_dir: Path, index: Path) -> str:
    """'prof-... (N stations, build ...)' for a symbolize result's index file, from the
    perf.data path it names (artifacts/<measurement id>/...); '?' when unknown."""
    real = inside(data_dir, index)
    try:
        perf_data = Path(json.loads(real.read_text())["perf_data"]) if real else Path()
    except (OSError, ValueError, KeyError, TypeError):
        return "?"
    pid = perf_data.parent.name
    if not re.fullmatch(r"prof-[0-9a-f]{12}", pid):
        return "?"
    path = inside(data_dir, RecordStore(data_dir).root / "prof" / f"{pid}.json")
    try:
        rec = parse_record(path.read_text(), MeasurementRecord, path) if path else None
    except (OSError, RecordUnreadable):
        rec = None
    return f"{pid} ({rec.stations} stations, {_build(rec.build_id)})" if rec else pid
