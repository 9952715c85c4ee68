"""How an A/B is scheduled on a lab, decided from what was measured there, not from the lab's
kind: interleaved rounds (A B, B A, ...) when switching images is cheap against the windows a
round buys, else A in one block and B in another (with A measured again after B: A-B-A)."""

from __future__ import annotations

from typing import Literal

Interleave = bool | Literal["auto"]


def interleaves(setting: Interleave, switch_s: float | None, *, window_s: float,
                step_windows: int, settle_s: float = 0.0) -> bool:
    """Whether the A/B alternates. `setting` is the profile's `[decision] interleave`: True or
    False is the user's decision; "auto" interleaves when one switch of image (flash +
    fingerprint verify, measured: `switch_s`) costs no more than the windows one arm adds per
    round (`step_windows` x `window_s`, plus the settle a switch brings; `step_windows` is the
    rule's `round_step()`: 1 for pairs), i.e. interleaving at most doubles a round. Unknown
    cost (nothing measured yet): not interleaved -- a flash that may be a reboot is not spent
    on a guess."""
    if setting != "auto":
        return bool(setting)
    if switch_s is None:
        return False
    return switch_s <= step_windows * window_s + settle_s
