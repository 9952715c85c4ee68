#!/usr/bin/env bash
# `make test`'s suite on a 2-core box, in two phases: scripts/test-suite.sh PYTEST [ARGS...]
#
#  1. the tests marked `light` (they read no measurement: tests/conftest.py LIGHT_MODULES), on
#     LIGHT_WORKERS pytest-xdist workers, a module to a worker (`--dist loadfile`: a module's
#     tests share its fixtures -- one vlab, one SSH server). Alone they mostly wait (on a server's
#     start-up, a DUT, a build): one worker keeps about half a core busy.
#  2. every other test in the foreground -- a CPU share measured in real seconds -- and beside
#     it, at `nice -n 19`, the two qlab streams: the tests marked `icount` (the qlab loop: its CPU%
#     is counted in guest instructions, so the host's load does not move it, only how long it
#     takes) and those marked `guest` (a qlab of their own, read for behaviour or for effects far
#     off any scatter: GUEST_MODULES). At nice 19 QEMU gets only what the measured tests leave
#     idle: their processes, at nice 0, take a core back the moment they wake.
#
# A background stream's output is printed whole after it ends, not interleaved. Every phase
# runs even when an earlier one failed; the exit status is the first failure's (a stream that
# selects no test -- pytest's 5, e.g. with a single test file in ARGS -- is not a failure).
set -uo pipefail

[ $# -ge 1 ] || { echo "usage: $0 PYTEST [PYTEST_ARGS...]" >&2; exit 2; }
pytest=("$@")
workers=${LIGHT_WORKERS:-3}
logs=$(mktemp -d "${TMPDIR:-/tmp}/labwarden-suite.XXXXXX")
pids=()
trap 'rm -rf "$logs"; for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done' EXIT

status=0
note() { [ "$1" = 0 ] || [ "$1" = 5 ] || [ "$status" != 0 ] || status=$1; }

echo "== phase 1: the light tests, on $workers workers"
t0=$SECONDS
"${pytest[@]}" -n "$workers" --dist loadfile -m "light and not icount and not guest"; note $?
echo "== phase 1 took $((SECONDS - t0)) s"

echo "== phase 2: the measured tests, with the icount and guest tests beside them at nice 19" \
     "(each printed when it ends)"
t0=$SECONDS
nice -n 19 "${pytest[@]}" -m icount >"$logs/icount" 2>&1 &
pids+=($!)
nice -n 19 "${pytest[@]}" -m "guest and not icount" >"$logs/guest" 2>&1 &
pids+=($!)
"${pytest[@]}" -m "not icount and not light and not guest"; note $?
names=(icount guest)  # in the order of pids
for i in 0 1; do
  wait "${pids[$i]}"; rc=$?
  name=${names[$i]}
  echo "== phase 2: the $name tests"
  cat "$logs/$name"
  note $rc
done
pids=()
echo "== phase 2 took $((SECONDS - t0)) s"
exit "$status"
