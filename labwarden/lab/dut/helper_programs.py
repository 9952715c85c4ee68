"""DUT-side helper programs (C sources beside this module: lw_pause.c): built on the host, uploaded to
the DUT's tmp dir.

A helper is built once per (source, compiler) into the lab's data dir and uploaded by SFTP only
when the DUT's copy is missing or its sha256 differs, so repeated calls cost one `sha256sum`.

Toolchain: the profile's `[build] cc` and `strip` -- `cc` and `strip` from PATH by default,
which fits the vlab (the DUT is this host); a router needs its firmware's cross compiler
(`aarch64-linux-gnu-gcc`, a MIPS OpenWrt SDK's gcc). The helper is plain C99 + Linux syscalls,
so any of them builds it; tests/test_portable_dut.py builds an aarch64 one and runs it under
qemu-aarch64.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from labwarden.lab.config import LabProfile
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.errors import DeviceError

HELPERS = {"lw-pause": "lw_pause.c"}
"""Helper name (its file name on the DUT) -> C source in this package (labwarden/lab/dut/)."""

CFLAGS = ("-O2", "-Wall", "-Wextra", "-std=gnu99")


class HelperBuildError(DeviceError):
    """The helper did not compile (or no compiler was found)."""


def source(name: str) -> bytes:
    try:
        return (resources.files("labwarden.lab.dut") / HELPERS[name]).read_bytes()
    except KeyError:
        raise ValueError(f"unknown DUT helper {name!r}; helpers: {', '.join(HELPERS)}") from None


def build(name: str, out_dir: Path, compiler: str = "cc", strip: str | None = None) -> Path:
    """Compile helper `name` into out_dir (cached by sha256 of source, toolchain and flags);
    `strip` (the same toolchain's) makes the copy sent to the DUT small."""
    cc = shutil.which(compiler)
    if cc is None:
        raise HelperBuildError(f"no C compiler {compiler!r} in PATH to build the DUT helper {name}",
                               "install it, or set [build] cc in the lab profile to the DUT's "
                               "cross compiler (e.g. aarch64-linux-gnu-gcc)")
    strip_bin = shutil.which(strip) if strip else None
    if strip and strip_bin is None:
        raise HelperBuildError(f"no {strip!r} in PATH to strip the DUT helper {name}",
                               "set [build] strip in the lab profile to the toolchain's strip")
    src = source(name)
    key = hashlib.sha256(src + "\0".join([cc, str(strip_bin), *CFLAGS]).encode()).hexdigest()[:16]
    binary = out_dir / f"{name}-{key}"
    if binary.is_file():
        return binary
    out_dir.mkdir(parents=True, exist_ok=True)
    src_path = out_dir / f"{name}-{key}.c"
    src_path.write_bytes(src)
    tmp = binary.with_suffix(".tmp")
    res = subprocess.run([cc, *CFLAGS, "-o", str(tmp), str(src_path)], capture_output=True,
                         text=True, timeout=120)
    if res.returncode != 0:
        raise HelperBuildError(f"{compiler} failed on {HELPERS[name]}: {res.stderr.strip()[-400:]}",
                               "fix the helper source, or check the compiler")
    if strip_bin is not None:
        res = subprocess.run([strip_bin, str(tmp)], capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            raise HelperBuildError(f"{strip} failed on {name}: {res.stderr.strip()[-300:]}",
                                   "set [build] strip to the strip of the same toolchain as cc")
    tmp.replace(binary)
    return binary


async def ensure(dev: Device, profile: LabProfile, name: str) -> str:
    """The helper's path on the DUT, built with the profile's toolchain and uploaded if missing
    or different."""
    local = await asyncio.to_thread(build, name, profile.data_dir() / "dut-helpers",
                                    profile.build.cc, profile.build.strip)
    want = await asyncio.to_thread(lambda: hashlib.sha256(local.read_bytes()).hexdigest())
    remote = f"{profile.dut.paths.tmp.rstrip('/')}/{name}"
    if (await dev.sha256([remote]))[remote] != want:
        await dev.put(local, remote)
    # put() keeps no mode; chmod is cheap and also repairs a copy someone made non-executable
    await dev.run(["chmod", "0755", remote], check=True)
    return remote
