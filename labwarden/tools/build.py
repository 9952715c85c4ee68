"""build: compile the firmware at a ref with patches, in a clean worktree, content-addressed.

Changes nothing on the DUT. The same (ref, patches) is a cache hit. Deploy files are stripped;
debug info goes to a perf-ready symfs. A patch that does not apply or code that does not compile
fails with the failing lines.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import Field

from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.host.builder import BuildError
from labwarden.lab.host.builds import compiled, recipe
from labwarden.lab.host.patchstore import check_ref, lab_patches
from labwarden.results.build import BuildOutput
from labwarden.tools.context import LabContext


class BuildInput(ToolInput):
    patches: list[str] = Field(default_factory=list, max_length=32, description="patch ids (e.g. "
                               "'0901') or .patch paths, applied in order", examples=[["0901", "0902"]])
    ref: str = Field("HEAD", description="git ref of the firmware repo to build", examples=["HEAD"])


async def run(ctx: LabContext, inp: BuildInput) -> BuildOutput:
    recipe_ = recipe(ctx.profile)
    loop = asyncio.get_running_loop()
    steps: list[str] = []

    def progress(msg: str) -> None:  # called from the worker thread
        steps.append(msg)
        asyncio.run_coroutine_threadsafe(ctx.report(len(steps), 5, msg), loop)

    try:
        manifest, cached = await compiled(recipe_, inp.patches, inp.ref, progress)
    except BuildError as exc:
        if exc.stage == "patch lookup":  # name only the patches this caller may use
            exc.remedy = lab_patches(ctx.data_dir).lookup_remedy(recipe_.patches_dirs,
                                                                 ctx.principal)
        raise
    log = Path(manifest.image).parent / "build.log"
    tail = log.read_text().splitlines()[-5:] if log.exists() else []
    return BuildOutput(build_id=manifest.build_id, git_hash=manifest.git_hash,
                       artifacts=manifest.artifacts, image=manifest.image, symfs=manifest.symfs,
                       cached=cached, log_tail=tail)


def _precheck(ctx: LabContext, inp: BuildInput) -> None:
    # another principal's submitted patch does not exist for this caller (lab/host/patchstore.py)
    lab_patches(ctx.data_dir).check("patches", inp.patches, ctx.profile.patch_roots(),
                                    ctx.principal)
    check_ref(ctx.profile, ctx.data_dir, "ref", inp.ref, ctx.principal)  # nor a build's commit of it


SPEC = ToolSpec(name="build", description=describe(__doc__),
                input=BuildInput, output=BuildOutput, run=run, effect="host_only",
                idempotent=True, budget_class="build", path_args=frozenset({"patches"}),
                precheck=_precheck)
