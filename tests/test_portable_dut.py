"""The DUT side is portable: every DUT-side script runs under busybox ash with nothing but
busybox in PATH (no getconf, no coreutils), CLK_TCK is read without getconf, and the C helper is
built with the profile's toolchain -- an aarch64 ELF from Debian's gcc-aarch64-linux-gnu, run
under qemu-aarch64.

Real parts: Debian's dropbear in a mount namespace (busybox ash as root's shell and as /bin/sh),
the real cross compiler and qemu-user; skipped with the reason where the packages are missing
(`make setup` installs them)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from labwarden.lab.conditions import clk_tck, clk_tck_from_auxv, clk_tck_from_uptime
from labwarden.lab.dut import helper_programs, kstat, pids, sampler
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.jobs import DutJobs
from labwarden.vlab import stockssh
from tests import stockdut

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def dropbear(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stockssh.StockSsh]:
    yield from stockdut.serve("dropbear", tmp_path_factory.mktemp("dropbear"))


@pytest.fixture(scope="module")
def busybox_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH holding busybox's applets and nothing else (as on a router without extras)."""
    if not os.path.exists(stockssh.BUSYBOX):
        stockdut.cannot_run("busybox is not installed (apt-get install busybox)")
    bindir = tmp_path_factory.mktemp("bb")
    applets = subprocess.run([stockssh.BUSYBOX, "--list"], capture_output=True, text=True,
                             check=True).stdout.split()
    for name in applets:
        (bindir / name).symlink_to(stockssh.BUSYBOX)
    assert "getconf" not in applets
    return str(bindir)


async def test_clk_tck_without_getconf(dropbear: stockssh.StockSsh, busybox_path: str) -> None:
    async with Device(dropbear.endpoint(), env={"PATH": busybox_path}) as dev:
        assert (await dev.run(["getconf", "CLK_TCK"])).exit_status == 127  # busybox has none
        want = os.sysconf("SC_CLK_TCK")
        assert await clk_tck(dev) == want
        assert await clk_tck_from_uptime(dev) == want  # the fallback, without auxv


def test_auxv_of_any_word_size_and_byte_order() -> None:
    """A router may be 32-bit MIPS big-endian: the auxv parser finds AT_CLKTCK in any layout."""
    import struct

    data = Path("/proc/self/auxv").read_bytes()
    words = [struct.unpack_from("<Q", data, i)[0] for i in range(0, len(data), 8)]
    for fmt in ("<Q", ">Q", "<I", ">I"):
        mask = 0xFFFFFFFF if fmt.endswith("I") else (1 << 64) - 1
        assert clk_tck_from_auxv(b"".join(struct.pack(fmt, w & mask) for w in words)) == \
            os.sysconf("SC_CLK_TCK"), fmt
    assert clk_tck_from_auxv(b"not an auxv") is None


async def test_dut_scripts_run_under_busybox_ash(dropbear: stockssh.StockSsh,
                                                 busybox_path: str) -> None:
    """The sampler, pidof, the kernel split's snapshot and the job wrapper/stopper with busybox
    only."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        async with Device(dropbear.endpoint(), env={"PATH": busybox_path}) as dev:
            res = await dev.run(sampler.argv(sleeper.pid, 2), timeout=10)
            got = sampler.parse(res.stdout)
            assert res.exit_status == 0 and len(got.samples) == 2 and got.samples[0].rss_kb > 0
            assert sleeper.pid in await pids.pidof(dev, Path(sys.executable).name[:15])
            snap = await kstat.snapshot(dev)  # busybox cat of /proc/uptime, stat, softirqs
            assert snap.uptime_s and snap.cpus and "NET_RX" in snap.softirqs
            async with DutJobs(dev, str(dropbear.root)) as jobs:
                job = asyncio.ensure_future(jobs.exec("nap", ["sleep", "30"], timeout=60))
                for _ in range(100):
                    if list(Path(jobs.dir).glob("nap.pid")):
                        break
                    await asyncio.sleep(0.02)
                stopped = await jobs.stop()
                assert stopped and stopped[-1].startswith("stopped")
                res = await asyncio.wait_for(job, 5)
                assert res.exit_status == 128 + 15  # TERM, from labwarden, not a hang-up
                late = await jobs.exec("late", ["sleep", "30"], timeout=10)
                assert late.exit_status == 125  # a stopped group starts nothing more
            assert not Path(jobs.dir).exists()
    finally:
        sleeper.kill()
        sleeper.wait()


async def test_a_failure_stops_the_jobs_and_spares_a_reused_pid(dropbear: stockssh.StockSsh,
                                                                  busybox_path: str) -> None:
    """A failed measurement (an error, not a cancel) stops its jobs too; a pid file whose pid
    now names another process (its start time differs) never gets that process signalled."""
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        async with Device(dropbear.endpoint(), env={"PATH": busybox_path}) as dev:
            with pytest.raises(RuntimeError):
                async with DutJobs(dev, str(dropbear.root)) as jobs:
                    job = asyncio.ensure_future(jobs.exec("nap", ["sleep", "30"], timeout=60))
                    pidfile = Path(jobs.dir) / "nap.pid"
                    for _ in range(100):
                        if pidfile.exists() and " " in pidfile.read_text():
                            break
                        await asyncio.sleep(0.02)
                    (Path(jobs.dir) / "gone.pid").write_text(f"{bystander.pid} 1\n")
                    raise RuntimeError("the measurement failed")
            res = await asyncio.wait_for(job, 5)
            assert res.exit_status == 128 + 15, res
            assert str(bystander.pid) not in " ".join(jobs.stopped), jobs.stopped
            assert bystander.poll() is None
            assert not Path(jobs.dir).exists()
    finally:
        bystander.kill()
        bystander.wait()


def _machine(path: Path) -> str:
    with path.open("rb") as f:
        return str(ELFFile(f)["e_machine"])


def test_helper_built_with_the_profiles_cross_compiler(tmp_path: Path) -> None:
    cc, strip = "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-strip"
    if shutil.which(cc) is None or shutil.which(strip) is None:
        stockdut.cannot_run(f"{cc} is not installed (apt-get install gcc-aarch64-linux-gnu)")
    binary = helper_programs.build("lw-pause", tmp_path, compiler=cc, strip=strip)
    assert _machine(binary) == "EM_AARCH64"
    with binary.open("rb") as f:
        assert ELFFile(f).get_section_by_name(".symtab") is None  # stripped by the toolchain
    native = helper_programs.build("lw-pause", tmp_path)
    assert native != binary and _machine(native) == "EM_X86_64"
    qemu = shutil.which("qemu-aarch64")
    if qemu is None:
        stockdut.cannot_run("qemu-aarch64 is not installed (apt-get install qemu-user): built, not run")
    res = subprocess.run([qemu, "-L", "/usr/aarch64-linux-gnu", str(binary)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "usage: lw-pause" in res.stderr, res


def test_a_missing_cross_compiler_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(helper_programs.HelperBuildError) as err:
        helper_programs.build("lw-pause", tmp_path, compiler="mips-openwrt-linux-gcc")
    assert "[build] cc" in err.value.remedy
