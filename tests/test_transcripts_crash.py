"""kill -9 while events are being written: no acknowledged event is lost, the file and the chain
stay sound, and the next process continues the same chain. A third of the appends are not
durable (no fsync, as for read-only tool calls): kill -9 must not lose those either."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from labwarden.transcripts import TranscriptStore, audit

REPO = Path(__file__).resolve().parent.parent
TRIALS = 20

# Appends as fast as it can (tool calls, model calls, notes) and prints "seq hash" once each
# append has returned, i.e. once the event is acknowledged.
WRITER = """
import sys
from labwarden.core.call import ToolCallRecord
from labwarden.transcripts import Note, ToolCalled, TranscriptStore, pricing
store = TranscriptStore(sys.argv[1])
sid = sys.argv[2]
print("ready", flush=True)
sys.stdin.readline()  # "go": the parent starts writers ahead of time to hide their start-up
i = 0
while True:
    i += 1
    if i % 3 == 0:
        ev = pricing.model_call("claude-sonnet-4-5", {"input_tokens": i, "output_tokens": 7})
    elif i % 3 == 1:
        ev = ToolCalled.of(ToolCallRecord(tool="flash", args={"i": i, "pad": "x" * 300}, ok=True,
                                          result={"i": i}, artifacts=[f"a/{i}.log"]))
    else:
        ev = Note(text=f"note {i}")
    # tool calls as the runner writes a read-only one: no fsync, still acknowledged on return
    s = store.append_many(sid, [ev], durable=i % 3 != 1)[0]
    sys.stdout.write(f"{s.seq} {s.hash}\\n")
    sys.stdout.flush()
"""


AHEAD = 4
"""Writers started (imported, store open, waiting for "go") ahead of the running trial."""


def _spawn(db: Path, sid: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(db), sid], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _trial(proc: subprocess.Popen[str], rng: random.Random) -> list[tuple[int, str]]:
    """Let one writer go, kill -9 it at a random moment; the (seq, hash) pairs it acknowledged."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        assert proc.stdout.readline() == "ready\n", proc.stderr.read()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        lines = [proc.stdout.readline() for _ in range(rng.randint(0, 30))]
        time.sleep(rng.uniform(0, 0.01))  # land somewhere inside an append
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        lines += proc.stdout.read().splitlines(keepends=True)  # acknowledged before the kill
    finally:
        _reap(proc)
    assert proc.returncode == -signal.SIGKILL
    return [(int(seq), h) for seq, h in (ln.split() for ln in lines if ln.endswith("\n"))]


def _reap(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f is not None:
            f.close()


def test_kill_9_during_appends_loses_no_acknowledged_event(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with TranscriptStore(db) as store:
        sid = store.start_session("loop")
    rng = random.Random(int.from_bytes(os.urandom(4)))
    total_acked, t0 = 0, time.monotonic()
    waiting = [_spawn(db, sid) for _ in range(AHEAD)]
    try:
        for trial in range(TRIALS):
            proc = waiting.pop(0)
            if trial + AHEAD < TRIALS:
                waiting.append(_spawn(db, sid))
            acked = _trial(proc, rng)
            total_acked += len(acked)
            with TranscriptStore(db) as store:
                stored = {r.seq: r.hash for r in store.rows(sid)}
                lost = [seq for seq, h in acked if stored.get(seq) != h]
                assert not lost, f"trial {trial}: acknowledged events lost: {lost}"
                assert store.integrity_check() == ["ok"]
                report = audit(store, sid)
                assert report.ok, f"trial {trial}: {report.problems}"
    finally:
        for proc in waiting:
            _reap(proc)
    with TranscriptStore(db) as store:
        n = len(store.rows(sid))
    print(f"\nkill -9: {TRIALS} trials, {total_acked} acknowledged events, 0 lost, {n} stored, "
          f"chain and integrity ok after each, {time.monotonic() - t0:.1f} s")
    assert n >= total_acked + 1
