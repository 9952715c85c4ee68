"""The suspect policy: which DUT process a tool may pause (SIGSTOP / ptrace stop). One module,
one forbidden set; the guard applies it to the argument a tool's spec names (`suspect_arg`).
What a name resolves to on the DUT right now (pid 1, our SSH session's ancestor, the target's
pid, already stopped) is checked by the tool itself, against live state."""

from __future__ import annotations

from labwarden.lab.config import TargetSection

FORBIDDEN = frozenset({"init", "procd", "systemd", "sshd", "dropbear", "ubusd", "netifd",
                       "lw-pause", "python", "python3", "labwarden"})
"""Never paused, whatever a profile says: the DUT's init, SSH server and buses (pausing them cuts
off or wedges the DUT), and labwarden's own helpers."""


def problem(target: TargetSection, name: str) -> str | None:
    """Why `name` may not be paused under this profile's [target], or None if it may."""
    if name == target.process:
        return f"{name} is the target process itself: pausing it measures nothing"
    if name in FORBIDDEN:
        return f"{name} is a system process (init, SSH server, bus) or labwarden's own, never paused"
    if name not in target.suspects:
        return (f"{name!r} is not in the profile's allowlist [target] suspects = "
                f"{target.suspects or '[]'}")
    return None


REMEDY = "name a suspect from [target] suspects in the lab profile (add one there only if pausing it is safe)"
