#!/bin/sh
# System pieces labwarden needs beyond Python: a C toolchain (vlab firmware), perf, cargo (for
# inferno) and a mounted tracefs (uprobe counters). Installs what is missing when root; as a
# normal user it only reports (the vlab runs without root; uprobes do not).
set -u
missing=""
need() { command -v "$1" >/dev/null 2>&1 || missing="$missing $2"; }
need gcc gcc; need make make; need git git; need objcopy binutils; need tar tar
# ripgrep: source_search uses it when present (a Python fallback otherwise; tests compare both)
need rg ripgrep
command -v perf >/dev/null 2>&1 && perf --version >/dev/null 2>&1 || missing="$missing linux-perf"
command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ] || missing="$missing cargo"
# headless Chromium: the report test opens the HTML report and screenshots it
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"

if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing$missing"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  else
    echo "setup: missing$missing -- as root: apt-get install$missing" >&2
  fi
fi

if [ ! -e /sys/kernel/tracing/uprobe_events ]; then
  if [ "$(id -u)" = 0 ]; then
    mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null \
      && echo "setup: mounted tracefs at /sys/kernel/tracing" \
      || echo "setup: could not mount tracefs: uprobe counters will be unavailable" >&2
  else
    echo "setup: tracefs not mounted (as root: mount -t tracefs nodev /sys/kernel/tracing)" >&2
  fi
fi
exit 0
