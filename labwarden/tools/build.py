"""build: compile the firmware at a ref with patches, in a clean worktree, content-addressed.

Changes nothing on the DUT. The same (ref, patches) is a cache hit. Deploy files are stripped;
debug info goes to a perf-ready symfs. A patch that does not apply or code that does not compile
fails with the failing lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from labwarden.core.errors import ToolError
from labwarden.core.paths import contained, is_regular_file, within
from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.host import builder
from labwarden.tools.context import LabContext


class BuildInput(ToolInput):
    patches: list[str] = Field(default_factory=list, max_length=32, description="patch ids (e.g. "
                               "'0901') or .patch paths, applied in order", examples=[["0901", "0902"]])
    ref: str = Field("HEAD", description="git ref of the firmware repo to build", examples=["HEAD"])


class BuildOutput(BaseModel):
    build_id: str
    git_hash: str = Field(description="commit built; embedded in the binaries")
    artifacts: list[builder.Artifact]
    image: str = Field(description="image file to flash")
    symfs: str = Field(description="host symfs for perf script")
    cached: bool
    log_tail: list[str] = Field(description="last lines of the build log")


def recipe(ctx: LabContext) -> builder.BuildRecipe:
    """The profile's build recipe; submitted patches (the lab's data dir `patches/`, written by
    patch_submit) are found by id after the profile's own patch directories, so a submitted
    name can never shadow a shipped patch id."""
    rec = builder.recipe_of(ctx.profile.build, ctx.profile.dut.paths.rootfs)
    rec.patches_dirs = ctx.profile.patch_roots()  # the guard's roots, the data dir's last
    return rec


async def compiled(recipe_: builder.BuildRecipe, patches: list[str], ref: str,
                   progress: Callable[[str], None] = lambda _m: None,
                   ) -> tuple[builder.BuildManifest, bool]:
    """builder.build in a worker thread. Cancelled (the session's wall time, a client giving
    up), it stops the confined build command and waits for its processes to be gone before the
    cancellation goes on: nothing a patch compiled outlives the call."""
    stop = threading.Event()
    work = asyncio.ensure_future(asyncio.to_thread(builder.build, recipe_, patches, ref,
                                                   progress, stop))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        stop.set()
        with contextlib.suppress(BaseException):
            await work
        raise


async def run(ctx: LabContext, inp: BuildInput) -> BuildOutput:
    recipe_ = recipe(ctx)
    loop = asyncio.get_running_loop()
    steps: list[str] = []

    def progress(msg: str) -> None:  # called from the worker thread
        steps.append(msg)
        asyncio.run_coroutine_threadsafe(ctx.report(len(steps), 5, msg), loop)

    manifest, cached = await compiled(recipe_, inp.patches, inp.ref, progress)
    log = Path(manifest.image).parent / "build.log"
    tail = log.read_text().splitlines()[-5:] if log.exists() else []
    return BuildOutput(build_id=manifest.build_id, git_hash=manifest.git_hash,
                       artifacts=manifest.artifacts, image=manifest.image, symfs=manifest.symfs,
                       cached=cached, log_tail=tail)


def load_manifest(ctx: LabContext, build_id: str) -> builder.BuildManifest:
    """The manifest of an earlier build (resolved inside the builds dir), or a clear error
    naming what exists."""
    builds = Path(ctx.profile.build.builds).expanduser()
    path = within(builds, build_id, "manifest.json", what="build_id") \
        if build_id.isalnum() and len(build_id) <= 64 else None
    if path is None or not is_regular_file(path):
        known = sorted(p.parent.name for p in builds.glob("*/manifest.json"))[:10]
        raise ToolError("invalid_input", f"build_id: no build {build_id[:64]!r}",
                        f"run `build` first; known builds: {', '.join(known) or 'none'}")
    manifest = builder.BuildManifest.model_validate_json(path.read_text())
    for produced in (manifest.image, manifest.symfs):  # a planted manifest points nowhere else
        contained(produced, [path.parent], what="build_id")
    return manifest


SPEC = ToolSpec(name="build", description=describe(__doc__),
                input=BuildInput, output=BuildOutput, run=run, effect="host_only",
                idempotent=True, budget_class="build", path_args=frozenset({"patches"}))
