"""What `fingerprint_verify` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from labwarden.core.devtext import DeviceText


class Mismatch(BaseModel):
    path: DeviceText
    check: str = Field(description="sha256 | build_id | git_hash | mapped | overlay | process")
    expected: str
    actual: DeviceText


class FingerprintOutput(BaseModel):
    verified: bool
    build_id: str
    git_hash_expected: str
    git_hash_running: DeviceText | None = Field(description="what the running target prints "
                                                "(None: [target] prints_git_hash is off)")
    mismatches: list[Mismatch]
    overlay_empty: bool
    overlay_files: list[DeviceText] = Field(description="first files found in the overlay")
    release_revision: DeviceText | None = Field(
        None, description="DISTRIB_REVISION as the DUT reports it: shown, never trusted")
    proven_by: list[str] = Field(default_factory=list, description="what was checked")
