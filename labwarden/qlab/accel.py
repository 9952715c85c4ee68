"""KVM or TCG for the guest: probe KVM with a timeout, fall back to TCG, and say which and why.

On some hosts /dev/kvm exists but a KVM guest hangs at boot (nested virtualisation); the probe
boots the qlab's own kernel and initramfs with `lwprobe=kvm` (the initramfs prints a line and
powers off) and gives it `timeout` seconds. The verdict is cached per host boot, QEMU and kernel,
so a hanging KVM costs its timeout once per host boot, not once per `qlab up`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from labwarden.core.errors import LabError
from labwarden.qlab.image import QlabImage
from labwarden.qlab.layout import cache_dir

AccelName = Literal["kvm", "tcg"]
PROBE_TIMEOUT_S = 20.0


class AccelError(LabError):
    kind = "tool"


class Accel(BaseModel):
    """The accelerator a qlab runs on."""

    name: AccelName
    cpu: str = Field(description="QEMU -cpu model: `host` under KVM, `max` under TCG")
    reason: str = Field(description="why this one (the probe's outcome, or what was asked)")
    probe_s: float | None = Field(None, description="seconds the KVM probe took, if it ran now")

    def qemu_args(self) -> list[str]:
        # TCG's translation cache defaults to 1 GiB of host memory; 256 MiB holds this guest's code
        return ["-accel", "tcg,tb-size=256" if self.name == "tcg" else self.name]


def qemu_binary() -> str:
    path = shutil.which("qemu-system-x86_64")
    if path is None:
        raise AccelError("qemu-system-x86_64 is not installed",
                         "run `make setup` (or apt-get install qemu-system-x86)")
    return path


def _tcg(reason: str) -> Accel:
    return Accel(name="tcg", cpu="max", reason=reason)


def _qemu_version(qemu: str) -> str:
    out = subprocess.run([qemu, "-version"], capture_output=True, text=True)
    return out.stdout.splitlines()[0] if out.stdout else "?"


def probe_kvm(image: QlabImage, timeout: float = PROBE_TIMEOUT_S) -> tuple[bool, str, float]:
    """Boot the image's kernel under KVM to its initramfs; (works, why, seconds)."""
    qemu = qemu_binary()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="qlab-probe-") as tmp:
        console = Path(tmp) / "console.log"
        argv = [qemu, "-accel", "kvm", "-cpu", "host", "-machine", "pc", "-m", "256",
                "-display", "none", "-nodefaults", "-no-user-config", "-no-reboot",
                "-serial", f"file:{console}", "-kernel", image.kernel, "-initrd", image.initrd,
                "-append", "console=ttyS0 quiet lwprobe=kvm"]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return False, f"a KVM guest did not reach its initramfs in {timeout:.0f} s (hangs here)", \
                time.monotonic() - t0
        seconds = time.monotonic() - t0
        text = console.read_text(errors="replace") if console.exists() else ""
        if out.returncode == 0 and "qlab-probe: kvm" in text:
            return True, f"a KVM guest booted to its initramfs in {seconds:.1f} s", seconds
        why = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return False, f"KVM failed (exit {out.returncode}: {why})", seconds


def choose(image: QlabImage, want: Literal["auto", "kvm", "tcg"] = "auto",
           timeout: float = PROBE_TIMEOUT_S) -> Accel:
    """KVM if asked for or if the probe says it works, else TCG."""
    if want == "tcg":
        return _tcg("TCG asked for (--accel tcg)")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        if want == "kvm":
            raise AccelError("/dev/kvm is missing or not accessible", "use --accel tcg (or auto)")
        return _tcg("no usable /dev/kvm")
    if want == "kvm":
        return Accel(name="kvm", cpu="host", reason="KVM asked for (--accel kvm), not probed")
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    key = f"{boot_id} {_qemu_version(qemu_binary())} {image.kernel_version}"
    verdicts = cache_dir() / "accel-probe.txt"  # lines: <key>\t<kvm|tcg>\t<reason>
    if verdicts.exists():
        for line in verdicts.read_text().splitlines():
            k, _, rest = line.partition("\t")
            name, _, reason = rest.partition("\t")
            if k == key and name in ("kvm", "tcg"):
                cached = f"{reason} (probed earlier this host boot)"
                return Accel(name="kvm", cpu="host", reason=cached) if name == "kvm" else _tcg(cached)
    works, reason, seconds = probe_kvm(image, timeout)
    verdicts.parent.mkdir(parents=True, exist_ok=True)
    with verdicts.open("a") as f:
        f.write(f"{key}\t{'kvm' if works else 'tcg'}\t{reason}\n")
    if works:
        return Accel(name="kvm", cpu="host", reason=reason, probe_s=round(seconds, 1))
    return Accel(name="tcg", cpu="max", reason=f"{reason}: falling back to TCG", probe_s=round(seconds, 1))
