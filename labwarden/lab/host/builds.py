"""A lab's firmware builds as the tools use them: the profile's recipe, a build run in a worker
thread that a cancellation stops, and an earlier build's manifest. Tools share these as
functions (build, patch_submit, experiment, bisect build; flash, fingerprint_verify, profile,
symbolize read a manifest) -- a tool never imports another tool for them."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

from labwarden.core.errors import ToolError
from labwarden.core.paths import contained, is_regular_file, within
from labwarden.lab.config import LabProfile
from labwarden.lab.host import builder


def recipe(profile: LabProfile) -> builder.BuildRecipe:
    """The profile's build recipe; submitted patches (the lab's data dir `patches/`, written by
    patch_submit) are found by id after the profile's own patch directories, so a submitted
    name can never shadow a shipped patch id."""
    rec = builder.recipe_of(profile.build, profile.dut.paths.rootfs)
    rec.patches_dirs = profile.patch_roots()  # the guard's roots, the data dir's last
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


def load_manifest(profile: LabProfile, build_id: str) -> builder.BuildManifest:
    """The manifest of an earlier build (resolved inside the builds dir), or a clear error
    naming what exists."""
    builds = Path(profile.build.builds).expanduser()
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
