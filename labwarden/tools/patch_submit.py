"""patch_submit: submit a unified diff as a new firmware patch -- checked to apply on the base
(ref + base patches) and to compile, refused if it touches a path the profile protects; stored
content-addressed with its author, then usable by `build` and `experiment` by its id -- by its
submitter's principal only, unless submitted `shared`.
The files it touches are what git changes when it applies it (any diff form counts); a patch that
changes a protected output's code by any route (its source, a header, a build rule) is refused too.

Host only: the diff reaches only `git apply` and the profile's build command, confined, never a
shell. A diff that does not apply returns git's lines; one that does not
compile returns the compiler's failing lines. The `patches` resource lists what is stored.
"""

from __future__ import annotations

import asyncio

from pydantic import Field

from labwarden.core.spec import ToolInput, ToolSpec, describe
from labwarden.lab.host import builder, patchstore
from labwarden.lab.host.builds import compiled, recipe
from labwarden.lab.host.patchstore import PatchMeta, PatchStore, ProtectedArtifact, ProtectedPath
from labwarden.results.patch_submit import PatchSubmitOutput
from labwarden.tools.context import LabContext


class PatchSubmitInput(ToolInput):
    name: str = Field(min_length=1, max_length=40, description="short name: lower-case letters, "
                      "digits, '-', '_' (the id adds a content hash)", examples=["bulk-pull"])
    diff: str = Field(min_length=1, max_length=patchstore.MAX_DIFF_BYTES, description="unified "
                      "diff against the base (`git diff` output: a/ and b/ prefixes)")
    base_patches: list[str] = Field(default_factory=list, max_length=16, description="patch ids "
                                    "the diff applies on top of (kept patches), in order",
                                    examples=[["0901"]])
    ref: str = Field("HEAD", max_length=100, description="git ref of the firmware repo")
    summary: str | None = Field(None, max_length=300, description="what it changes and why, in "
                                "one line (shown in the experiment ledger)")
    shared: bool = Field(False, description="let every principal of this server list, read, "
                         "build and experiment on it (default: only yours; over HTTP each token "
                         "NAME, or each anonymous MCP session, is a principal)")


def store(ctx: LabContext) -> PatchStore:
    return patchstore.lab_patches(ctx.data_dir)


def _changed(rec: builder.BuildRecipe, ref: str, base_patches: list[str], diff: str,
             name: str) -> list[str]:
    base = builder.git(rec.repo, "rev-parse", "--verify", f"{ref}^{{commit}}")
    earlier = [builder.resolve_patch(p, rec.patches_dirs).data for p in base_patches]
    return patchstore.changed_paths(rec.repo, base, earlier, patchstore.normalized(diff), name)


def _held(meta: PatchMeta, principal: str | None, shared: bool) -> PatchMeta:
    """`meta` once `principal` submitted the same diff under the same name: they hold it too
    (they have its content), and `shared` makes it everyone's."""
    others = meta.submitters
    if principal is not None and principal != meta.principal and principal not in others:
        others = [*others, principal]
    return meta.model_copy(update={"submitters": others, "shared": meta.shared or shared})


def _precheck(ctx: LabContext, inp: PatchSubmitInput) -> None:
    store(ctx).check("base_patches", inp.base_patches, ctx.profile.patch_roots(), ctx.principal,
                     unknown=True)
    patchstore.check_ref(ctx.profile, ctx.data_dir, "ref", inp.ref, ctx.principal)


async def run(ctx: LabContext, inp: PatchSubmitInput) -> PatchSubmitOutput:
    section = ctx.profile.build
    rec = recipe(ctx.profile)
    on = await asyncio.to_thread(patchstore.base_of, rec.repo, inp.ref, inp.base_patches)
    pid, sha = patchstore.patch_id(inp.name, inp.diff, on)  # the same diff on two bases: two ids
    files = await asyncio.to_thread(_changed, rec, inp.ref, inp.base_patches, inp.diff,
                                    f"{pid}.patch")
    hit = patchstore.protected(files, section.protected)
    if hit:
        raise ProtectedPath(hit, section.protected)
    patches = store(ctx)
    known = patches.meta(pid)
    if known is not None and known.base_patches == inp.base_patches and known.build_id:
        held = _held(known, ctx.principal, inp.shared)
        if held != known:
            patches.update(held)
        return PatchSubmitOutput(patch_id=pid, files=known.files, base_commit=known.base_commit,
                                 base_patches=known.base_patches, build_id=known.build_id,
                                 author=patches.shown(known, ctx.principal).author, cached=True)
    pending = patches.pending(pid, inp.diff)
    await ctx.report(1, 3, f"checking that {inp.name} applies on {inp.ref} + "
                     f"{inp.base_patches or 'no patches'} and compiles")
    try:
        manifest, _ = await compiled(rec, [*inp.base_patches, str(pending)], inp.ref)
        if section.protected_artifacts:  # the base's outputs: usually a cached build
            base, _ = await compiled(rec, inp.base_patches, inp.ref)
            moved = builder.changed_outputs(base, manifest, section.protected_artifacts)
            if moved:
                raise ProtectedArtifact(moved, f"the patch (it changes {', '.join(files[:8])})")
    except BaseException:
        pending.unlink(missing_ok=True)
        raise
    meta = PatchMeta(id=pid, name=inp.name, sha256=sha, files=files, ref=inp.ref,
                     base_commit=manifest.base, base_patches=inp.base_patches,
                     build_id=manifest.build_id, author=ctx.session_id, principal=ctx.principal,
                     summary=inp.summary, shared=inp.shared,
                     submitted_at=patchstore.now())
    known = patches.meta(pid)  # the same diff and name on another base: still its first author's
    if known is not None and known.principal != ctx.principal:
        meta = _held(known, ctx.principal, inp.shared).model_copy(update={
            "base_commit": meta.base_commit, "base_patches": meta.base_patches,
            "build_id": meta.build_id, "ref": meta.ref, "files": meta.files})
    patches.store(pending, meta)
    await ctx.report(3, 3, f"stored as {pid}")
    return PatchSubmitOutput(patch_id=pid, files=files, base_commit=manifest.base,
                             base_patches=inp.base_patches, build_id=manifest.build_id,
                             author=ctx.session_id, cached=False)


SPEC = ToolSpec(name="patch_submit", description=describe(__doc__), input=PatchSubmitInput,
                output=PatchSubmitOutput, run=run, effect="host_only", budget_class="build",
                free_text=frozenset({"diff", "summary"}), precheck=_precheck)
