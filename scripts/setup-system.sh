#!/bin/sh
# System pieces labwarden needs beyond Python: a C toolchain (vlab firmware), perf, cargo (for
# inferno), a mounted tracefs (uprobe counters) and the qlab's QEMU and image tools. Installs what
# is missing when root; as a normal user it only reports (the vlab runs without root; uprobes and
# the qlab image build do not).
set -u
missing=""
need() { command -v "$1" >/dev/null 2>&1 || missing="$missing $2"; }
need gcc gcc; need make make; need git git; need objcopy binutils; need tar tar
command -v perf >/dev/null 2>&1 && perf --version >/dev/null 2>&1 || missing="$missing linux-perf"
command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ] || missing="$missing cargo"
# headless Chromium: the report test opens the HTML report and screenshots it
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"

# the qlab (a Debian guest under QEMU): QEMU, mmdebstrap to build the guest root, e2fsprogs for
# its disk images, libnl headers for the firmware's nl80211 HAL, ssh for labgrid's SSHDriver
qlab=""
command -v qemu-system-x86_64 >/dev/null 2>&1 || qlab="$qlab qemu-system-x86"
command -v mmdebstrap >/dev/null 2>&1 || qlab="$qlab mmdebstrap"
command -v mkfs.ext4 >/dev/null 2>&1 || qlab="$qlab e2fsprogs"
command -v ssh >/dev/null 2>&1 || qlab="$qlab openssh-client"
[ -f /usr/include/libnl3/netlink/genl/genl.h ] || qlab="$qlab libnl-3-dev libnl-genl-3-dev"
command -v pkg-config >/dev/null 2>&1 || qlab="$qlab pkg-config"

if [ -n "$missing$qlab" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing$missing$qlab"
    apt-get update -qq
    [ -z "$missing" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    [ -z "$qlab" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $qlab >/dev/null
  else
    echo "setup: missing$missing$qlab -- as root: apt-get install$missing$qlab" >&2
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
