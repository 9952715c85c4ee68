#!/usr/bin/env bash
# `make test`'s suite on a 2-core box, in two phases: scripts/test-suite.sh PYTEST [ARGS...]
#
#  1. three streams at once: the tests marked `icount` (the qlab loop: its CPU% is counted in
#     guest instructions, so the host's load does not move it) and those marked `guest` (a qlab
#     of their own, read for behaviour or effects far off any scatter: tests/conftest.py
#     GUEST_MODULES) in the background, beside the tests marked `light` (they read no
#     measurement: LIGHT_MODULES);
#  2. every other test, alone: a CPU share measured in real seconds needs the host quiet.
#
# A background stream's output is printed whole after it ends, not interleaved. Every phase
# runs even when an earlier one failed; the exit status is the first failure's (a stream that
# selects no test -- pytest's 5, e.g. with a single test file in ARGS -- is not a failure).
set -uo pipefail

[ $# -ge 1 ] || { echo "usage: $0 PYTEST [PYTEST_ARGS...]" >&2; exit 2; }
pytest=("$@")
logs=$(mktemp -d "${TMPDIR:-/tmp}/labwarden-suite.XXXXXX")
pids=()
trap 'rm -rf "$logs"; for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done' EXIT

status=0
note() { [ "$1" = 0 ] || [ "$1" = 5 ] || [ "$status" != 0 ] || status=$1; }

echo "== phase 1: the icount and guest tests (in the background, each printed when it ends)" \
     "beside the light tests"
t0=$SECONDS
"${pytest[@]}" -m icount >"$logs/icount" 2>&1 &
pids+=($!)
"${pytest[@]}" -m "guest and not icount" >"$logs/guest" 2>&1 &
pids+=($!)
"${pytest[@]}" -m "light and not icount and not guest"; note $?
names=(icount guest)  # in the order of pids
for i in 0 1; do
  wait "${pids[$i]}"; rc=$?
  name=${names[$i]}
  echo "== phase 1: the $name tests"
  cat "$logs/$name"
  note $rc
done
pids=()
echo "== phase 1 took $((SECONDS - t0)) s"

echo "== phase 2: every other test, alone"
t0=$SECONDS
"${pytest[@]}" -m "not icount and not light and not guest"; note $?
echo "== phase 2 took $((SECONDS - t0)) s"
exit "$status"
