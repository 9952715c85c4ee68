"""What `patch_submit` returns: its spec's `output`."""

from __future__ import annotations

from pydantic import BaseModel, Field


class PatchSubmitOutput(BaseModel):
    patch_id: str = Field(description="use it in build / experiment")
    files: list[str]
    base_commit: str
    base_patches: list[str]
    build_id: str = Field(description="base + this patch, compiled")
    author: str | None = Field(description="the session that submitted it, when it is one of "
                               "this client's principal (else null)")
    cached: bool = Field(description="the same diff was submitted before under this name")
