"""The lab profile of every shipped lab kind, written by the code that writes it for a real lab
(the vlab's and the qlab's profile writers, the suite's logfilt profile) into a scratch dir,
without bringing a lab up: what the tool list, the prompts and bench/token_economy.py read.

The firmware repos get the history a real lab's has (the vlab's and the qlab's: several
commits; logfilt's: as tests/stockdut.py makes it), since `bisect` is listed only with one.
`logfilt_single(root)` is logfilt's profile over a repo of one commit: a lab without `bisect`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import asyncssh

from labwarden.lab.config import LabProfile
from labwarden.lab.host.builder import BuildManifest
from labwarden.qlab import profile_writer as qlab_writer
from labwarden.qlab import traffic
from labwarden.qlab.image import QlabImage
from labwarden.qlab.layout import QlabLayout
from labwarden.vlab import profile_writer as vlab_writer
from labwarden.vlab.layout import VlabLayout

KINDS = ("vlab", "qlab", "qlab-traffic", "logfilt")


def _repo(path: Path, commits: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", str(path), "-c", "user.name=fw", "-c", "user.email=fw@x.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    for i in range(commits):
        (path / "VERSION").write_text(f"{i}\n")
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", f"commit {i}"], check=True)


def _manifest() -> BuildManifest:
    return BuildManifest(build_id="b" * 16, git_hash="0" * 40, base="main", patches=[],
                         artifacts=[], image="/nonexistent/image", symfs="/nonexistent/symfs")


def _key_pair(private: Path) -> str:
    key = asyncssh.generate_private_key("ssh-ed25519")
    private.parent.mkdir(parents=True, exist_ok=True)
    key.write_private_key(str(private))
    key.write_public_key(str(private) + ".pub")
    return key.export_public_key().decode().strip()


def vlab(root: Path) -> LabProfile:
    layout = VlabLayout.at(root)
    _key_pair(layout.host_key)
    _repo(layout.src, 3)
    vlab_writer.write(layout, 1, _manifest())
    return LabProfile.from_file(layout.lab_toml)


def qlab(root: Path, *, traffic_router: bool = False) -> LabProfile:
    layout = QlabLayout.at(root)
    layout.root.mkdir(parents=True, exist_ok=True)
    host_key = _key_pair(root / "keys" / "host")
    image = QlabImage(key="k", base_key="b", dir=str(root), kernel_version="6.1", kernel="k",
                      initrd="i", rootfs="r", base_root="b", packages={}, requested={},
                      host_key=host_key, client_key=str(root / "keys" / "host"),
                      built_at="2026-11-26T00:00:00Z")
    _repo(layout.src, 3)
    qlab_writer.write(layout, image, _manifest(),
                      load_section=traffic.LOAD_SECTION if traffic_router else None)
    return LabProfile.from_file(layout.lab_toml)


def logfilt(root: Path) -> LabProfile:
    from tests import stockdut

    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(stockdut.LOGFILT, root / "src", ignore=shutil.ignore_patterns("dut"))
    stockdut.history(root / "src")  # v1.0 checked out, a branch `next` of three commits

    class Server:  # the endpoint logfilt_profile reads (a dropbear is not needed to list tools)
        @staticmethod
        def endpoint() -> object:
            return type("E", (), {"port": 2222, "key": str(root / "key"),
                                  "host_key": _key_pair(root / "key")})()

    lab = root / "lab.toml"
    lab.write_text(stockdut.logfilt_profile(root, Server(), root / "src"))  # type: ignore[arg-type]
    return LabProfile.from_file(lab)


def logfilt_single(root: Path) -> LabProfile:
    prof = logfilt(root)
    single = root / "single"
    _repo(single, 1)
    build = prof.build.model_copy(update={"repo": str(single)})
    return prof.model_copy(update={"build": build})


def profile(kind: str, root: Path) -> LabProfile:
    """The profile of lab kind `kind` (one of KINDS), written under `root`."""
    if kind == "vlab":
        return vlab(root)
    if kind == "qlab":
        return qlab(root)
    if kind == "qlab-traffic":
        return qlab(root, traffic_router=True)
    if kind == "logfilt":
        return logfilt(root)
    raise ValueError(f"unknown lab kind {kind!r}: one of {KINDS}")
