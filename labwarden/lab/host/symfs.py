"""A perf symfs for one perf.data: every DSO it recorded, at its exact recorded path, build-id checked.

Sources, in order: the build that ran (its manifest's `symfs`: stripped file + `.build-id` debug
file), then the DUT itself over SFTP, cached on the host by build-id in `symcache/<build-id>/`
(system libraries are fetched once, ever). A DUT debug file under
`/usr/lib/debug/.build-id/xx/rest.debug` is fetched too when the DUT has one. A file whose ELF
build-id differs from the recorded one is never accepted: it is reported in `missing` instead.

perf 6.1 records no build-ids with `-z` unless `--buildid-mmap` is given: then files are taken by
path and reported `verified=False` (FACTS: perf would accept a mismatched symfs silently).
"""

from __future__ import annotations

import mmap
import os
import re
import secrets
import shutil
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from labwarden.lab import elfsym
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.errors import DeviceError
from labwarden.lab.host.builder import BuildManifest

DEBUG_DIR = "usr/lib/debug/.build-id"


class RecordedDso(BaseModel):
    build_id: str = Field(description="as recorded in perf.data; '' when perf recorded none")
    path: str


class SymfsEntry(BaseModel):
    path: str = Field(description="DUT path, as recorded")
    build_id: str = Field(description="ELF build-id of the file placed in the symfs")
    source: str = Field(description="build | symcache | dut")
    debug: bool = Field(description="a .build-id debug file was placed beside it")
    verified: bool = Field(description="its build-id equals the one perf recorded")


class MissingDso(BaseModel):
    path: str
    build_id: str
    reason: str


class Symfs(BaseModel):
    root: str
    kallsyms: str
    buildids_recorded: bool = Field(description="perf.data carries build-ids (else files are "
                                    "taken by path, unverified)")
    entries: list[SymfsEntry]
    missing: list[MissingDso]


_MMAP2, _COMPRESSED, _HEADER_BUILD_ID = 10, 81, 2
_MISC_MMAP_BUILD_ID, _MISC_BUILD_ID_SIZE = 1 << 14, 1 << 15


def recorded_dsos(perf_data: Path) -> list[RecordedDso]:
    """Every file-backed mapping perf.data recorded, with its build-id where perf kept one.

    Read straight from the file, without a pass over the samples (`perf buildid-list` costs as
    much as the whole `perf script` and lists only DSOs hit by a sample IP, so a DSO seen only
    inside call chains -- the main binary, typically -- would be left out of the symfs).
    Build-ids come from MMAP2 events (`--buildid-mmap`) or the header's BUILD_ID feature.
    With -z the mappings synthesized at the start are read; later ones sit inside compressed
    records and are not (a library dlopen'ed mid-recording shows up as an unresolved `[name]`).
    """
    with perf_data.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as b:
        if b[:8] != b"PERFILE2":
            raise RuntimeError(f"{perf_data} is not a perf.data file (no PERFILE2 magic)")
        data_off, data_size = struct.unpack_from("<QQ", b, 40)
        found: dict[str, str] = {}
        off, end = data_off, min(data_off + data_size, len(b))
        while off + 8 <= end:
            rtype, misc, size = struct.unpack_from("<IHH", b, off)
            if size < 8 or rtype == _COMPRESSED:
                break
            if rtype == _MMAP2 and off + 72 < end:
                name = bytes(b[off + 72:off + size]).split(b"\0", 1)[0].decode(errors="replace")
                bid = ""
                if misc & _MISC_MMAP_BUILD_ID:
                    n = min(b[off + 40], 20)
                    bid = bytes(b[off + 44:off + 44 + n]).hex()
                if name.startswith("/") and not name.startswith("//") and (bid or name not in found):
                    found[name] = bid
            off += size
        for name, bid in _header_build_ids(b, data_off + data_size).items():
            if name in found and not found[name]:
                found[name] = bid
    return [RecordedDso(build_id=bid, path=name) for name, bid in found.items()]


def _header_build_ids(b: mmap.mmap, feat_off: int) -> dict[str, str]:
    """The HEADER_BUILD_ID feature section (perf writes it without -z): path -> build-id."""
    flags = int.from_bytes(b[72:104], "little")
    if not flags & (1 << _HEADER_BUILD_ID):
        return {}
    index = bin(flags & ((1 << _HEADER_BUILD_ID) - 1)).count("1")  # sections of lower bits first
    sec_off, sec_size = struct.unpack_from("<QQ", b, feat_off + 16 * index)
    out: dict[str, str] = {}
    off, end = sec_off, sec_off + sec_size
    while off + 8 <= end:
        _t, misc, size = struct.unpack_from("<IHH", b, off)
        if size < 36:
            break
        n = b[off + 32] if misc & _MISC_BUILD_ID_SIZE else 20
        name = bytes(b[off + 36:off + size]).split(b"\0", 1)[0].decode(errors="replace")
        if name.startswith("/"):
            out[name] = bytes(b[off + 12:off + 12 + min(n, 20)]).hex()
        off += size
    return out


def debug_rel(bid: str) -> str:
    return f"{DEBUG_DIR}/{bid[:2]}/{bid[2:]}.debug"


def _place(src: Path, dest: Path) -> None:
    """Hardlink src at dest (copy across filesystems); replaces what is there."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.unlink(missing_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


async def _fetch(dev: Device, remote: str, dest: Path) -> bool:
    """Copy a DUT file into dest (sha256-checked); False when the DUT has no such file."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        await dev.get(remote, dest)
    except DeviceError as exc:
        if "no such file" in exc.problem:
            return False
        raise
    return True


class _Assembler:
    def __init__(self, dev: Device, cache: Path, root: Path, manifest: BuildManifest | None):
        self.dev, self.cache, self.root = dev, cache, root
        self.build_symfs = Path(manifest.symfs) if manifest else None
        self.built = {a.path: a.build_id for a in manifest.artifacts} if manifest else {}
        self.entries: list[SymfsEntry] = []
        self.missing: list[MissingDso] = []
        self.sha256: dict[str, str | None] = {}

    async def add(self, dso: RecordedDso) -> None:
        rel = dso.path.lstrip("/")
        bid_built = self.built.get(dso.path)
        if self.build_symfs and bid_built and (not dso.build_id or dso.build_id == bid_built) \
                and (self.build_symfs / rel).is_file():
            _place(self.build_symfs / rel, self.root / rel)
            debug = self.build_symfs / debug_rel(bid_built)
            if debug.is_file():
                _place(debug, self.root / debug_rel(bid_built))
            self.entries.append(SymfsEntry(path=dso.path, build_id=bid_built, source="build",
                                           debug=debug.is_file(), verified=bool(dso.build_id)))
            return
        await self._from_dut(dso, rel, self.sha256.get(dso.path))

    async def _from_dut(self, dso: RecordedDso, rel: str, sha: str | None) -> None:
        """From the symcache (by recorded build-id; without one, by the DUT file's sha256), else
        fetched once from the DUT and checked against the recorded build-id."""
        name = Path(dso.path).name
        source = "symcache"
        key = self.cache / dso.build_id if dso.build_id else \
            self.cache / "sha256" / sha if sha else None
        if key is None or not (key / name).is_file():
            source = "dut"
            tmp = self.cache / "incoming" / f"{secrets.token_hex(4)}-{name}"
            if not await _fetch(self.dev, dso.path, tmp):
                self.missing.append(MissingDso(path=dso.path, build_id=dso.build_id,
                                               reason="not on the DUT and not in the build"))
                return
            got = elfsym.build_id(tmp)
            if dso.build_id and got != dso.build_id:
                tmp.unlink()
                self.missing.append(MissingDso(
                    path=dso.path, build_id=dso.build_id,
                    reason=f"build-id mismatch: the DUT's file has {got or 'none'} (changed since "
                           "the recording?)"))
                return
            key = self.cache / dso.build_id if dso.build_id else \
                self.cache / "sha256" / (sha or secrets.token_hex(8))
            key.mkdir(parents=True, exist_ok=True)
            (key / "build-id").write_text(got)
            tmp.replace(key / name)
        bid_file = key / "build-id"
        bid = dso.build_id or (bid_file.read_text().strip() if bid_file.is_file() else "")
        _place(key / name, self.root / rel)
        debug = await self._debug_file(bid) if bid else None
        if debug is not None:
            _place(debug, self.root / debug_rel(bid))
        self.entries.append(SymfsEntry(path=dso.path, build_id=bid, source=source,
                                       debug=debug is not None, verified=bool(dso.build_id)))

    async def _debug_file(self, bid: str) -> Path | None:
        """The DUT's detached debug file for bid (cached; a negative answer is cached too)."""
        cached = self.cache / bid / "debug"
        absent = self.cache / bid / "debug.absent"
        if cached.is_file():
            return cached
        if absent.exists():
            return None
        tmp = self.cache / "incoming" / f"{secrets.token_hex(4)}-{bid}.debug"
        if await _fetch(self.dev, "/" + debug_rel(bid), tmp) and elfsym.build_id(tmp) == bid:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp.replace(cached)
            return cached
        tmp.unlink(missing_ok=True)
        absent.parent.mkdir(parents=True, exist_ok=True)
        absent.touch()
        return None


async def assemble(dev: Device, dsos: Sequence[RecordedDso], root: Path, cache: Path,
                   manifest: BuildManifest | None, kallsyms: Path) -> Symfs:
    """Build the symfs at `root` (replacing it) for these recorded DSOs."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    asm = _Assembler(dev, cache, root, manifest)
    unrecorded = [d.path for d in dsos if not d.build_id and d.path not in asm.built]
    asm.sha256 = await dev.sha256(unrecorded) if unrecorded else {}  # one round trip for all
    for dso in dsos:
        await asm.add(dso)
    if asm.build_symfs and (asm.build_symfs / DEBUG_DIR).is_dir():  # every debug file of the build
        for f in (asm.build_symfs / DEBUG_DIR).rglob("*.debug"):
            dest = root / f.relative_to(asm.build_symfs)
            if not dest.exists():
                _place(f, dest)
    return Symfs(root=str(root), kallsyms=str(kallsyms),
                 buildids_recorded=any(d.build_id for d in dsos), entries=asm.entries,
                 missing=asm.missing)


SCRIPT_FIELDS = "comm,pid,tid,time,event,ip,sym,dso"
"""FACTS: inferno needs `event`; `--no-inline` is ~5x faster on big libraries."""


def _own_pids() -> list[str]:
    """perf script, run in a pid namespace of its own (and a /proc showing only it). When a
    recorded pid is alive on this host in another mount namespace -- the vlab's confined
    services, or a container whose pid a DUT's pid happens to equal -- perf enters that
    namespace to read the DSOs, where the symfs is not, and drops every call chain."""
    if shutil.which("unshare") is None:
        return []
    own = ["unshare", "--pid", "--fork", "--mount-proc"]
    if os.geteuid() != 0:
        own[1:1] = ["--user", "--map-root-user"]
    return [*own, "--"]


def script_argv(perf: str, perf_data: Path, symfs: Path, kallsyms: Path, empty_buildid_dir: Path,
                fast: bool = True) -> list[str]:
    """`perf script` on a symfs; perf's own ~/.debug cache is kept out by an empty buildid dir."""
    argv = [*_own_pids(), perf, "--buildid-dir", str(empty_buildid_dir), "script", "-i", str(perf_data),
            "--symfs", str(symfs), "--kallsyms", str(kallsyms)]
    return [*argv, "-F", SCRIPT_FIELDS, "--no-inline"] if fast else argv


_FRAME_DSO = re.compile(rb"\((/[^()]*)\)\s*$")


def sampled_dsos(perf: str, perf_data: Path, kallsyms: Path, empty_dir: Path) -> set[str]:
    """The DSO paths that samples or their call chains touch: `perf script -F ip,dso` against an
    empty symfs (nothing is resolved, so it is cheap: ~0.5 s for 3 s of a busy 2-core host).

    A system-wide recording maps every process of the DUT (244 DSOs, 255 MB on a busy host
    here) while its samples touch a dozen: the symfs is made of those only."""
    argv = [*_own_pids(), perf, "--buildid-dir", str(empty_dir), "script", "-i", str(perf_data), "--symfs",
            str(empty_dir), "--kallsyms", str(kallsyms), "-F", "ip,dso"]
    found: set[str] = set()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as p:
        assert p.stdout is not None
        for line in p.stdout:
            m = _FRAME_DSO.search(line)
            if m:
                found.add(m.group(1).decode(errors="replace"))
    if p.returncode != 0:
        raise RuntimeError(f"perf script -F ip,dso exited {p.returncode} on {perf_data}")
    return found


def collapse(script: list[str], collapse_bin: str, out: Path, err: Path,
             options: Sequence[str] = ()) -> None:
    """`script | inferno-collapse-perf [options] > out`, two argv processes joined by a pipe (no
    shell); `options` are constants of the caller's (`--tid`)."""
    with out.open("wb") as fout, err.open("wb") as ferr:
        p1 = subprocess.Popen(script, stdout=subprocess.PIPE, stderr=ferr)
        assert p1.stdout is not None
        try:
            p2 = subprocess.Popen([collapse_bin, *options], stdin=p1.stdout, stdout=fout,
                                  stderr=ferr)
        finally:
            p1.stdout.close()  # p2 holds the read end; perf gets SIGPIPE if p2 dies
        rc2, rc1 = p2.wait(), p1.wait()
    if rc1 != 0 or rc2 != 0:
        tail = err.read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"perf script exited {rc1}, inferno-collapse-perf exited {rc2}: "
                           + " | ".join(tail))


def flamegraph(flamegraph_bin: str, folded_in: Path | bytes, out: Path, title: str) -> None:
    """inferno-flamegraph of a folded file (or folded bytes, e.g. a diff) into an SVG."""
    data = folded_in if isinstance(folded_in, bytes) else folded_in.read_bytes()
    res = subprocess.run([flamegraph_bin, "--hash", "--title", title], input=data,
                         capture_output=True, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"inferno-flamegraph exited {res.returncode}: "
                           f"{res.stderr.decode(errors='replace').strip()[-300:]}")
    out.write_bytes(res.stdout)


def diff_folded(diff_bin: str, base: Path, new: Path) -> bytes:
    """inferno-diff-folded (normalised: shares, not counts, are compared)."""
    res = subprocess.run([diff_bin, "--normalize", str(base), str(new)], capture_output=True,
                         timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"inferno-diff-folded exited {res.returncode}: "
                           f"{res.stderr.decode(errors='replace').strip()[-300:]}")
    return res.stdout


def defining_dso(symfs: Symfs, names: Sequence[str]) -> dict[str, str]:
    """name -> basename of the DSO whose symbols (its debug file's, else its own) define it."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    want = set(names)
    found: dict[str, str] = {}
    root = Path(symfs.root)
    for e in symfs.entries:
        debug = root / debug_rel(e.build_id)
        path = debug if e.debug and debug.is_file() else root / e.path.lstrip("/")
        if e.source != "build" or not path.is_file():
            continue  # the question is about the firmware's code, not system libraries
        with path.open("rb") as f:
            for sec in ELFFile(f).iter_sections():
                if isinstance(sec, SymbolTableSection):
                    for sym in sec.iter_symbols():
                        if sym.name in want and sym["st_shndx"] != "SHN_UNDEF":
                            found.setdefault(sym.name, Path(e.path).name)
    return found
