"""The qlab as labgrid sees it: one env YAML target with a QEMUDriver, a NetworkService (dropbear
through QEMU's user-mode hostfwd on 127.0.0.1), an SSHDriver and the QlabStrategy -- the
daemon's (env.yaml). labwarden loads client-env.yaml: the same target without the QEMUDriver,
with a QlabdStrategy that asks the daemon (remote.py).

QEMU's devices, in the order the guest relies on:
- the base image (QEMUDriver `disk`, read-only: one cached file shared by every qlab);
- ttyS0 to logs/console.log (kernel and init), ttyS1 the QEMUDriver's console socket (a root
  shell, as a bench's serial cable);
- the flash disk (drive serial `lwflash`: the firmware image) and the data disk (serial `lwdata`:
  the persistent overlay), found by serial in the guest, not by name;
- the user-mode NIC (`mgmt` in the guest, 10.0.2.15) with ssh forwarded from 127.0.0.1:PORT
  (QEMU creates it after the -device NICs, so the guest finds it by its MAC); labgrid's ssh goes
  through a wrapper that pins the guest's host key (keys/known_hosts);
- `extra_nics`: more NICs (the traffic variant's lan/wan taps) as QEMU -netdev/-device pairs.
"""

from __future__ import annotations

import shlex
import shutil

import yaml
from pydantic import BaseModel, Field

from labwarden.core.errors import LabError
from labwarden.qlab.accel import Accel, qemu_binary
from labwarden.qlab.clock import GuestClock
from labwarden.qlab.image import QlabImage
from labwarden.qlab.layout import QlabLayout

TARGET = "main"
MGMT_MAC = "52:54:00:12:34:56"
"""The user-mode NIC's MAC: the guest finds it by this and names it `mgmt`."""
BOOT_ARGS = "console=ttyS0 panic=5 loglevel=4"


class Nic(BaseModel):
    """One more guest NIC: a QEMU netdev (e.g. `tap,id=lan,ifname=lwlan0,script=no,downscript=no`)
    and its device (e.g. `virtio-net-pci,netdev=lan,mac=52:54:00:12:34:10`)."""

    netdev: str
    device: str


class GuestSpec(BaseModel):
    """What the guest is given: memory, CPUs, accelerator, clock, the ssh port, more NICs."""

    memory: str = Field("512M", description="QEMU -m")
    smp: int = Field(2, ge=1, le=8)
    accel: Accel
    clock: GuestClock = Field(default_factory=lambda: GuestClock(kind="realtime"))
    ssh_port: int = Field(ge=1, le=65535)
    extra_nics: list[Nic] = Field(default_factory=list)


def qemu_extra_args(layout: QlabLayout, image: QlabImage, spec: GuestSpec) -> list[str]:
    args = [*spec.accel.qemu_args(), *spec.clock.qemu_args(), "-smp", str(spec.smp),
            "-nodefaults", "-no-user-config",
            "-initrd", image.initrd,
            "-serial", f"file:{layout.console_log}",  # ttyS0; the driver's socket becomes ttyS1
            "-drive", f"if=none,id=flash,format=raw,file={layout.flash_disk}",
            "-device", "virtio-blk-pci,drive=flash,serial=lwflash",
            "-drive", f"if=none,id=data,format=raw,file={layout.data_disk}",
            "-device", "virtio-blk-pci,drive=data,serial=lwdata",
            "-device", "virtio-rng-pci"]
    for nic in spec.extra_nics:
        args += ["-netdev", nic.netdev, "-device", nic.device]
    return args


def env_config(layout: QlabLayout, image: QlabImage, spec: GuestSpec) -> dict[str, object]:
    return {
        "imports": ["labwarden.qlab.strategy"],
        "targets": {TARGET: {
            "resources": {"NetworkService": {"address": "127.0.0.1", "port": spec.ssh_port,
                                             "username": "root"}},
            "drivers": {
                "QlabQEMUDriver": {  # strategy.py: QEMUDriver with its start bounded
                    "qemu_bin": "qemu", "machine": "pc", "cpu": spec.accel.cpu,
                    "memory": spec.memory, "kernel": "kernel", "disk": "rootfs",
                    "disk_opts": "readonly=on", "boot_args": BOOT_ARGS, "display": "none",
                    "nic": f"user,model=virtio-net-pci,mac={MGMT_MAC},"
                           f"hostfwd=tcp:127.0.0.1:{spec.ssh_port}-:22",
                    "extra_args": shlex.join(qemu_extra_args(layout, image, spec)),
                },
                "SSHDriver": {"keyfile": image.client_key, "connection_timeout": 240.0},
                "QlabStrategy": {},
            },
        }},
        "images": {"kernel": image.kernel, "rootfs": image.rootfs},
        "tools": {"qemu": qemu_binary(), "ssh": str(layout.keys / "ssh-pinned")},
    }


def client_config(layout: QlabLayout, image: QlabImage, spec: GuestSpec) -> dict[str, object]:
    """The same target as labwarden sees it (remote.py): dropbear, and a strategy that asks the
    daemon through its control socket -- no QEMUDriver, so loading it can never start a QEMU."""
    return {
        "imports": ["labwarden.qlab.remote"],
        "targets": {TARGET: {
            "resources": {"NetworkService": {"address": "127.0.0.1", "port": spec.ssh_port,
                                             "username": "root"},
                          "QlabdControl": {"path": str(layout.socket)}},
            "drivers": {
                "SSHDriver": {"keyfile": image.client_key, "connection_timeout": 240.0},
                "QlabdStrategy": {},
            },
        }},
        "tools": {"ssh": str(layout.keys / "ssh-pinned")},
    }


def _pinned_ssh(layout: QlabLayout) -> None:
    """labgrid's SSHDriver runs ssh with StrictHostKeyChecking=no and no way to pass options; ssh
    keeps the first value of an option, so this wrapper, put first, pins the guest's host key."""
    ssh = shutil.which("ssh")
    if ssh is None:
        raise LabError("no `ssh` client on PATH (labgrid's SSHDriver runs it)",
                       "apt-get install openssh-client")
    wrapper = layout.keys / "ssh-pinned"
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(ssh)} -o StrictHostKeyChecking=yes "
                       f"-o UserKnownHostsFile={shlex.quote(str(layout.known_hosts))} \"$@\"\n")
    wrapper.chmod(0o755)


def write(layout: QlabLayout, image: QlabImage, spec: GuestSpec) -> None:
    _pinned_ssh(layout)
    header = (f"# labgrid environment of the qlab in {layout.root}, written by `labwarden qlab up`\n"
              f"# image {image.key} (kernel {image.kernel_version}); {spec.accel.name}: "
              f"{spec.accel.reason}; clock {spec.clock.spec}\n")
    text = yaml.safe_dump(env_config(layout, image, spec), sort_keys=False, width=200)
    layout.env_yaml.write_text(header + "# the daemon's (qlabd holds the QEMUDriver); labwarden loads "
                               f"{layout.client_env_yaml.name}\n" + text)
    text = yaml.safe_dump(client_config(layout, image, spec), sort_keys=False, width=200)
    layout.client_env_yaml.write_text(header + text)
