#!/usr/bin/env bash
# `make test`'s suite on a 2-core box, in two phases: scripts/test-suite.sh PYTEST [ARGS...]
#
#  1. the tests marked `light` (they read no measurement: tests/conftest.py LIGHT_MODULES), on
#     LIGHT_WORKERS pytest-xdist workers, a module to a worker (`--dist loadfile`: a module's
#     tests share its fixtures -- one vlab, one SSH server). Alone they mostly wait (on a server's
#     start-up, a DUT, a build): one worker keeps about half a core busy.
#  2. every other test in the foreground -- a CPU share measured in real seconds -- and beside
#     it, at idle priority, the two qlab streams: the tests marked `icount` (the qlab loop: its
#     CPU% is counted in guest instructions, so the host's load does not move it, only how long it
#     takes) and those marked `guest` (a qlab of their own, read for behaviour or for effects far
#     off any scatter: GUEST_MODULES). Idle priority is a cpu cgroup with `cpu.idle` 1 (as root):
#     QEMU then runs only on CPU the measured tests leave idle. `nice` alone does not do it: with
#     the kernel's autogroups (sched_autogroup_enabled) a niced QEMU in a session of its own got
#     as much CPU as a measured daemon's session, and a daemon that needed 1.2 cores read ~60%.
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
idle=""  # the cpu cgroup of the background streams, when one could be made
trap 'rm -rf "$logs"; for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
      [ -z "$idle" ] || rmdir "$idle" 2>/dev/null' EXIT

# A cpu cgroup whose tasks run only on idle CPU (cpu.idle, Linux >= 5.15; cgroup v1's cpu
# controller or v2's), printed; nothing when this host or user cannot make one.
idle_cgroup() {
  local dir
  if [ -w /sys/fs/cgroup/cpu ] && [ -e /sys/fs/cgroup/cpu/cpu.idle ]; then
    dir=/sys/fs/cgroup/cpu/labwarden-suite-$$
  elif [ -w /sys/fs/cgroup/cgroup.subtree_control ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || return 0
    dir=/sys/fs/cgroup/labwarden-suite-$$
  else
    return 0
  fi
  mkdir "$dir" 2>/dev/null && echo 1 >"$dir/cpu.idle" 2>/dev/null && echo "$dir" && return 0
  rmdir "$dir" 2>/dev/null
  return 0
}

# run "$@" at idle priority: in $idle when there is one, and at nice 19 either way
background() {
  [ -z "$idle" ] || echo "$BASHPID" >"$idle/cgroup.procs"
  exec nice -n 19 "$@"
}

status=0
note() { [ "$1" = 0 ] || [ "$1" = 5 ] || [ "$status" != 0 ] || status=$1; }

echo "== phase 1: the light tests, on $workers workers"
t0=$SECONDS
"${pytest[@]}" -n "$workers" --dist loadfile -m "light and not icount and not guest"; note $?
echo "== phase 1 took $((SECONDS - t0)) s"

idle=$(idle_cgroup)
echo "== phase 2: the measured tests, with the icount and guest tests beside them at idle" \
     "priority (${idle:+cgroup $idle, cpu.idle 1, and }nice 19; each printed when it ends)"
t0=$SECONDS
(background "${pytest[@]}" -m icount) >"$logs/icount" 2>&1 &
pids+=($!)
(background "${pytest[@]}" -m "guest and not icount") >"$logs/guest" 2>&1 &
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
