"""The host's Debian, as the qlab image builder needs it: the mirror apt is configured with, the
candidate versions of the guest's packages (the image cache key), and `apt-get download`.

Only Debian's own archives are taken from apt's sources (the main archive with its -updates
suite, and the security archive); any third-party source (a vendor's cloud SDK, nodesource) is
left out: the guest is built from Debian alone.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from pydantic import BaseModel, Field

from labwarden.core.errors import LabError

SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))


class DebianError(LabError):
    """apt cannot tell or fetch what the image needs."""

    kind = "tool"


class AptSource(BaseModel):
    """One Debian archive and suite, as a one-line sources.list entry gives it."""

    uri: str = Field(examples=["http://deb.debian.org/debian"])
    suite: str = Field(examples=["bookworm"])
    components: list[str] = Field(examples=[["main"]])

    def line(self) -> str:
        return f"deb {self.uri} {self.suite} {' '.join(self.components)}"


def codename() -> str:
    """The host's release codename (the guest is built from the same release)."""
    text = Path("/etc/os-release").read_text()
    m = re.search(r"^VERSION_CODENAME=\"?([a-z]+)", text, re.M)
    if not m:
        raise DebianError("/etc/os-release names no VERSION_CODENAME: not a Debian host?",
                          "build the qlab image on Debian (bookworm)")
    return m.group(1)


def _deb822(text: str) -> list[AptSource]:
    found = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
            continue
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                found.append(AptSource(uri=uri, suite=suite, components=fields.get(
                    "components", "main").split()))
    return found


def _one_line(text: str) -> list[AptSource]:
    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line.startswith("deb "):
            continue
        parts = [p for p in re.sub(r"\[[^]]*\]", "", line).split()[1:]]
        if len(parts) >= 3:
            found.append(AptSource(uri=parts[0], suite=parts[1], components=parts[2:]))
    return found


def debian_sources(release: str | None = None) -> list[AptSource]:
    """apt's Debian archives for `release` (default: the host's): the main suite first, then its
    -updates and -security suites. Components are reduced to `main` (all the guest needs)."""
    release = release or codename()
    found: list[AptSource] = []
    for place in SOURCES:
        files = sorted(place.iterdir()) if place.is_dir() else [place]
        for f in files:
            if not f.is_file():
                continue
            if f.suffix == ".sources":
                found += _deb822(f.read_text())
            elif f.suffix == ".list":
                found += _one_line(f.read_text())
    wanted = {release: 0, f"{release}-updates": 1, f"{release}-security": 2}
    debian = [s.model_copy(update={"components": ["main"]}) for s in found
              if s.suite in wanted and re.search(r"/debian(-security)?/?$", s.uri)]
    debian.sort(key=lambda s: wanted[s.suite])
    if not debian or debian[0].suite != release:
        raise DebianError(f"apt's sources name no Debian archive for {release} "
                          f"(looked in {', '.join(map(str, SOURCES))})",
                          f"add `deb http://deb.debian.org/debian {release} main` to "
                          "/etc/apt/sources.list")
    return debian


def _apt(argv: list[str], what: str, timeout: float = 600) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise DebianError(f"{what} failed: {(out.stderr or out.stdout).strip()[-400:]}",
                          "check the network and apt's sources (`apt-get update`)")
    return out.stdout


def candidates(packages: list[str]) -> dict[str, str | None]:
    """Candidate version of each package in apt's lists (None: apt does not know it)."""
    text = _apt(["apt-cache", "policy", *packages], "apt-cache policy")
    found: dict[str, str | None] = dict.fromkeys(packages)
    current = None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = line[:-1]
        elif current in found and line.strip().startswith("Candidate:"):
            value = line.split(":", 1)[1].strip()
            found[current] = None if value == "(none)" else value
    return found


def update_lists() -> None:
    _apt(["apt-get", "update", "-qq"], "apt-get update")


def kernel_package(flavour: str = "amd64") -> str:
    """The versioned kernel package the metapackage `linux-image-<flavour>` pulls in."""
    text = _apt(["apt-cache", "depends", f"linux-image-{flavour}"], "apt-cache depends")
    m = re.search(rf"Depends: (linux-image-[0-9][^\s]*-{flavour})\b", text)
    if not m:
        raise DebianError(f"linux-image-{flavour} depends on no versioned kernel image",
                          "run `apt-get update` and retry")
    return m.group(1)


def download(package: str, version: str, dest: Path) -> Path:
    """`apt-get download PACKAGE=VERSION` into `dest` (cached: a second call reuses the file)."""
    dest.mkdir(parents=True, exist_ok=True)
    arch = _apt(["dpkg", "--print-architecture"], "dpkg --print-architecture").strip()
    name = f"{package}_{version.split(':', 1)[-1]}_{arch}.deb"
    if (dest / name).exists():
        return dest / name
    out = subprocess.run(["apt-get", "download", "-q", f"{package}={version}"], cwd=dest,
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0 or not (dest / name).exists():
        raise DebianError(f"apt-get download {package}={version} failed: "
                          f"{(out.stderr or out.stdout).strip()[-400:]}",
                          "run `apt-get update` (the version may have left the mirror) and retry")
    return dest / name
