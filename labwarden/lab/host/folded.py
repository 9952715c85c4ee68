"""Folded stacks (inferno-collapse-perf output): parse, merge into a call tree, and measure.

One line per distinct stack: `comm;outer;...;leaf COUNT`. The first frame is the command name
(inferno's default, no --pid/--tid). Definitions used throughout (tested in tests/test_symbolize.py):

- *unresolved frame*: `[unknown]`, or a bracketed DSO name such as `[libc.so.6]` -- what inferno
  writes when perf gave an address no symbol. The comm frame is never counted.
- `unknown_pct`: % of samples whose *leaf* frame (where the CPU was) is unresolved.
- `unknown_frames_pct`: % of all frames (weighted by samples, comm excluded) that are unresolved.
- `stacks_with_unknown_pct`: % of samples with at least one unresolved frame anywhere.
- *total %* of a function: % of samples with the function anywhere in the stack (counted once per
  sample, so recursion does not inflate it); *self %*: % of samples where it is the leaf.
- depth: frames per sample, comm excluded.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from labwarden.core.devtext import DeviceText

_UNRESOLVED = re.compile(r"\[[^\[\]]*\]")


def unresolved(frame: str) -> bool:
    return _UNRESOLVED.fullmatch(frame) is not None


@dataclass
class Folded:
    stacks: list[tuple[tuple[str, ...], int]]
    samples: int

    @classmethod
    def parse(cls, text: str) -> Folded:
        stacks: list[tuple[tuple[str, ...], int]] = []
        total = 0
        for line in text.splitlines():
            stack, sep, count = line.rpartition(" ")
            if not sep or not count.isdigit():
                continue
            n = int(count)
            stacks.append((tuple(stack.split(";")), n))
            total += n
        return cls(stacks, total)

    @classmethod
    def read(cls, path: Path) -> Folded:
        return cls.parse(path.read_text(errors="replace"))

    def pct(self, n: float) -> float:
        return 100.0 * n / self.samples if self.samples else 0.0

    def text(self) -> str:
        """Folded lines again (sorted, as inferno writes them)."""
        return "".join(f"{';'.join(frames)} {n}\n" for frames, n in sorted(self.stacks))


class Depth(BaseModel):
    mean: float
    p95: int
    max: int


class Stats(BaseModel):
    samples: int
    unknown_pct: float = Field(description="% of samples whose leaf frame is unresolved")
    unknown_frames_pct: float = Field(description="% of frames (sample-weighted) unresolved")
    stacks_with_unknown_pct: float = Field(description="% of samples with any unresolved frame")
    unresolved_top: list[str] = Field(description="most frequent unresolved frames, '% frame' "
                                      "(share of samples holding it)")
    depth: Depth


def stats(f: Folded, top: int = 6) -> Stats:
    leaf_unknown = frames = frames_unknown = any_unknown = 0
    depths: Counter[int] = Counter()
    holders: Counter[str] = Counter()
    for frames_t, n in f.stacks:
        body = frames_t[1:]
        bad = [fr for fr in body if unresolved(fr)]
        depths[len(body)] += n
        frames += len(body) * n
        frames_unknown += len(bad) * n
        if bad:
            any_unknown += n
            for fr in set(bad):
                holders[fr] += n
        if body and unresolved(body[-1]):
            leaf_unknown += n
    mean = sum(d * n for d, n in depths.items()) / f.samples if f.samples else 0.0
    return Stats(samples=f.samples, unknown_pct=round(f.pct(leaf_unknown), 3),
                 unknown_frames_pct=round(100.0 * frames_unknown / frames, 3) if frames else 0.0,
                 stacks_with_unknown_pct=round(f.pct(any_unknown), 3),
                 unresolved_top=[f"{f.pct(n):5.1f}%  {fr}" for fr, n in holders.most_common(top)],
                 depth=Depth(mean=round(mean, 1), p95=_quantile(depths, 0.95),
                             max=max(depths, default=0)))


def _quantile(hist: Counter[int], q: float) -> int:
    total = sum(hist.values())
    need, seen = math.ceil(q * total), 0
    for value in sorted(hist):
        seen += hist[value]
        if seen >= need:
            return value
    return 0


@dataclass
class Node:
    name: str
    total: int = 0
    self: int = 0
    children: dict[str, Node] = field(default_factory=dict)


def tree(f: Folded) -> Node:
    """The merged call tree (one pass); the root is a synthetic node holding every sample."""
    root = Node("all", total=f.samples)
    for frames, n in f.stacks:
        node = root
        for fr in frames:
            child = node.children.get(fr)
            if child is None:
                child = node.children[fr] = Node(fr)
            child.total += n
            node = child
        node.self += n
    return root


def _elide(names: list[str], width: int) -> str:
    text = " > ".join(names)
    if len(text) <= width:
        return text
    head, tail = names[0], names[-1]
    keep = [tail]
    for name in reversed(names[1:-1]):
        if len(" > ".join([head, "...", name, *keep])) > width:
            break
        keep.insert(0, name)
    return " > ".join([head, "...", *keep])[: width]


def tree_lines(f: Folded, top: int = 25, width: int = 110) -> list[str]:
    """The hot paths as at most `top` lines `TOTAL%  SELF%  <indent>name`, depth-first, heaviest
    child first. The `top` heaviest nodes are kept (an ancestor is never lighter than its
    descendants, so the kept set is a tree); a chain of nodes passing every sample on to one
    child is printed as one line `a > b > c`."""
    root = tree(f)
    rows: list[tuple[int, str, int, int, list[Node]]] = []  # depth, label, total, self, children

    def walk(node: Node, depth: int) -> None:
        names = [node.name]
        while len(node.children) == 1 and node.self == 0:
            node = next(iter(node.children.values()))
            names.append(node.name)
        kids = sorted(node.children.values(), key=lambda c: -c.total)
        rows.append((depth, _elide(names, width - 16 - 2 * depth), node.total, node.self, kids))
        for kid in kids:
            walk(kid, depth + 1)

    for kid in sorted(root.children.values(), key=lambda c: -c.total):
        walk(kid, 0)
    keep = sorted(range(len(rows)), key=lambda i: (-rows[i][2], rows[i][0], i))[:top]
    return [f"{f.pct(rows[i][2]):6.1f}% {f.pct(rows[i][3]):6.1f}%  {'  ' * rows[i][0]}{rows[i][1]}"
            for i in sorted(keep)]


class PathStep(BaseModel):
    frame: str
    total_pct: float


def dominant_path(f: Folded, max_frames: int = 48) -> list[PathStep]:
    """From the root, always into the heaviest child, while that child holds at least as many
    samples as the node itself keeps (so it ends where the time is spent, not in an interrupt)."""
    node, path = tree(f), []
    while node.children:
        child = max(node.children.values(), key=lambda c: c.total)
        if child.total < node.self:
            break
        node = child
        path.append(PathStep(frame=node.name[:120], total_pct=round(f.pct(node.total), 2)))
    return path[-max_frames:]


def shares(f: Folded) -> tuple[dict[str, int], dict[str, int]]:
    """Samples per function: (total: anywhere in the stack, once per sample; self: as the leaf)."""
    total: Counter[str] = Counter()
    self_: Counter[str] = Counter()
    for frames, n in f.stacks:
        for fr in set(frames[1:]):
            total[fr] += n
        if len(frames) > 1:
            self_[frames[-1]] += n
    return dict(total), dict(self_)


class Delta(BaseModel):
    """One function's change between two profiles: its share of the samples, and -- given each
    window's measured CPU -- its CPU in percentage points of one core. Shares alone mislead: a
    function whose CPU fell 3x can grow in share when everything else fell more."""

    symbol: str
    base_pct: float = Field(description="total % of the baseline's samples")
    new_pct: float = Field(description="total % of this profile's samples")
    delta_pp: float = Field(description="new - base share, percentage points of the samples")
    base_cpu_pp: float | None = Field(None, description="CPU in the baseline window, pp of one "
                                      "core (share x the window's target CPU)")
    new_cpu_pp: float | None = Field(None, description="CPU in this window, pp of one core")
    delta_cpu_pp: float | None = Field(None, description="new - base CPU, pp of one core: the "
                                       "absolute change (None without both windows' CPU)")


def top_deltas(base: Folded, new: Folded, n: int = 15, base_cpu: float | None = None,
               new_cpu: float | None = None) -> list[Delta]:
    """The functions that moved most between two profiles: by absolute CPU when both windows'
    target CPU (% of one core) is given, else by share."""
    bt, _ = shares(base)
    nt, _ = shares(new)
    absolute = base_cpu is not None and new_cpu is not None
    rows: list[tuple[float, float, Delta]] = []
    for s in set(bt) | set(nt):
        b, m = base.pct(bt.get(s, 0)), new.pct(nt.get(s, 0))
        row = Delta(symbol=s[:120], base_pct=round(b, 2), new_pct=round(m, 2),
                    delta_pp=round(m - b, 2))
        moved = 0.0
        if absolute:
            assert base_cpu is not None and new_cpu is not None
            bc, nc = b * base_cpu / 100, m * new_cpu / 100
            row.base_cpu_pp, row.new_cpu_pp = round(bc, 2), round(nc, 2)
            row.delta_cpu_pp = round(nc - bc, 2)
            moved = abs(nc - bc)
        rows.append((moved, abs(m - b), row))
    rows.sort(key=lambda r: (-r[0], -r[1], r[2].symbol))  # absolute CPU first, then share
    return [d for _, _, d in rows[:n] if d.delta_pp != 0.0 or d.delta_cpu_pp]


def function_shares(f: Folded, names: Iterable[str]) -> dict[str, tuple[float, float]]:
    """name -> (total %, self %); 0.0 for a function no sample holds."""
    total, self_ = shares(f)
    return {name: (round(f.pct(total.get(name, 0)), 3), round(f.pct(self_.get(name, 0)), 3))
            for name in names}


# Per-thread breakdown. A system-wide recording is collapsed with inferno's `--tid`, so the first
# frame is `comm-PID/TID` (comm may itself hold '-' and '/': `kworker/0:1-events`); the flame
# graph and the hot paths are drawn from the same stacks merged by comm (`by_comm`), so each
# kernel thread (ksoftirqd/0, kworker/...) and process shows as one tower, as seed 001 shows them.
_TID_FRAME = re.compile(r"^(?P<comm>.*)-(?P<pid>\d+)/(?P<tid>\d+)$")
_GROUPS = (
    (re.compile(r"^ksoftirqd/\d+$"), "ksoftirqd/*"),
    (re.compile(r"^kworker/"), "kworker/*"),
    (re.compile(r"^swapper(/\d+)?$"), "swapper (idle)"),
    (re.compile(r"^irq/\d+-"), "irq/* (threaded interrupts)"),
)


def thread_frame(frame: str) -> tuple[str, int | None, int | None]:
    """`comm-PID/TID` -> (comm, pid, tid); a bare comm (no --tid) -> (comm, None, None)."""
    m = _TID_FRAME.match(frame)
    return (m["comm"], int(m["pid"]), int(m["tid"])) if m else (frame, None, None)


def thread_group(comm: str) -> str:
    """The family a thread belongs to: `ksoftirqd/*`, `kworker/*`, `swapper (idle)`, or its comm."""
    return next((name for rx, name in _GROUPS if rx.search(comm)), comm)


def by_comm(f: Folded) -> Folded:
    """The same stacks with `comm-PID/TID` first frames reduced to comm, counts merged."""
    merged: Counter[tuple[str, ...]] = Counter()
    for frames, n in f.stacks:
        merged[(thread_frame(frames[0])[0], *frames[1:])] += n
    return Folded(list(merged.items()), f.samples)


class ThreadShare(BaseModel):
    thread: DeviceText = Field(description="comm as perf recorded it (ksoftirqd/0, kworker/1:2-events, "
                        "the target's name, ...)")
    pid: int | None = Field(description="None: the recording was collapsed by comm only")
    tid: int | None
    samples: int
    pct: float = Field(description="% of all samples")
    top_self: list[DeviceText] = Field(description="its hottest leaf functions, '% name' (% of this "
                                "thread's samples)")


class ThreadGroup(BaseModel):
    group: DeviceText = Field(description="ksoftirqd/*, kworker/*, swapper (idle), or a comm")
    threads: int = Field(description="distinct threads (or comms) in it")
    samples: int
    pct: float = Field(description="% of all samples")


def threads(f: Folded, top: int = 15, leaves: int = 3) -> tuple[list[ThreadShare], list[ThreadGroup]]:
    """Samples per thread (heaviest first, at most `top`) and per thread family."""
    count: Counter[str] = Counter()
    leaf: dict[str, Counter[str]] = {}
    for frames, n in f.stacks:
        count[frames[0]] += n
        if len(frames) > 1:
            leaf.setdefault(frames[0], Counter())[frames[-1]] += n
    shares = []
    for frame, n in count.most_common(top):
        comm, pid, tid = thread_frame(frame)
        hot = leaf.get(frame, Counter()).most_common(leaves)
        shares.append(ThreadShare(thread=comm[:60], pid=pid, tid=tid, samples=n,
                                  pct=round(f.pct(n), 2),
                                  top_self=[f"{100.0 * k / n:5.1f}%  {s[:100]}" for s, k in hot]))
    fam: Counter[str] = Counter()
    members: dict[str, set[str]] = {}
    for frame, n in count.items():
        g = thread_group(thread_frame(frame)[0])
        fam[g] += n
        members.setdefault(g, set()).add(frame)
    groups = [ThreadGroup(group=g[:60], threads=len(members[g]), samples=n, pct=round(f.pct(n), 2))
              for g, n in fam.most_common(top)]
    return shares, groups
