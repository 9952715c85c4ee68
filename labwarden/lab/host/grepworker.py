"""The Python fallback of source_search, in a process of its own: Python's `re` backtracks (a
pattern like `(.|.)*Z` runs for ever) and holds the interpreter lock while it matches, so run
in the server it would stall every other call. Here it is a child the server kills at
`sourcetree.SEARCH_SECONDS` or when the call is cancelled (the session's wall time).

`python -m labwarden.lab.host.grepworker` reads {root, pattern, glob, context} as JSON on stdin
and writes {"hits": [...]} or {"problem", "remedy"} as JSON on stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path

from labwarden.lab.host.sourcetree import SEARCH_SECONDS, Hit, SourceError, search_python


async def search(root: Path, pattern: str, glob: str | None, context: int) -> list[Hit]:
    """search_python's hits, computed in a child process that is killed when it overruns or
    the caller is cancelled."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "labwarden.lab.host.grepworker", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    ask = json.dumps({"root": str(root), "pattern": pattern, "glob": glob, "context": context})
    try:
        out, err = await asyncio.wait_for(proc.communicate(ask.encode()), SEARCH_SECONDS)
    except TimeoutError:
        raise SourceError(f"pattern: the search took over {SEARCH_SECONDS:g} s and was stopped "
                          "(a pattern that backtracks, such as (.|.)*)",
                          "use a simpler pattern or a path_glob") from None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.shield(proc.wait())
    try:
        answer = json.loads(out)
    except ValueError:
        raise SourceError("the search process failed: " + err.decode(errors="replace")[-300:],
                          "report this; ripgrep (apt-get install ripgrep) avoids the fallback") from None
    if "problem" in answer:
        raise SourceError(answer["problem"], answer["remedy"])
    return [Hit.model_validate(h) for h in answer["hits"]]


def main() -> None:
    ask = json.loads(sys.stdin.read())
    try:
        hits = search_python(Path(ask["root"]), ask["pattern"], ask["glob"], ask["context"])
    except SourceError as exc:
        json.dump({"problem": exc.problem, "remedy": exc.remedy}, sys.stdout)
        return
    json.dump({"hits": [h.model_dump() for h in hits]}, sys.stdout)


if __name__ == "__main__":
    main()
