"""What `build` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from labwarden.lab.host import builder


class BuildOutput(BaseModel):
    build_id: str
    git_hash: str = Field(description="commit built; embedded in the binaries")
    artifacts: list[builder.Artifact]
    image: str = Field(description="image file to flash")
    symfs: str = Field(description="host symfs for perf script")
    cached: bool
    log_tail: list[str] = Field(description="last lines of the build log")
