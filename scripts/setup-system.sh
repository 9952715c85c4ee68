#!/bin/sh
# System pieces labwarden needs beyond Python: a C toolchain (vlab firmware), perf, cargo (for
# inferno), a mounted tracefs (uprobe counters) and the qlab's QEMU and image tools. Installs what
# is missing when root; as a normal user it only reports (the vlab runs without root; uprobes and
# the qlab image build do not).
set -u
missing=""
need() { command -v "$1" >/dev/null 2>&1 || missing="$missing $2"; }
need gcc gcc; need make make; need git git; need objcopy binutils; need tar tar
# ripgrep: source_search uses it when present (a Python fallback otherwise; tests compare both)
need rg ripgrep
# jq: docs/tutorial.md picks ids out of results with it (tests/test_tutorial_walk.py runs it)
need jq jq
command -v perf >/dev/null 2>&1 && perf --version >/dev/null 2>&1 || missing="$missing linux-perf"
command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ] || missing="$missing cargo"
# headless Chromium: the report test opens the HTML report and screenshots it
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
# DUTs that are not the vlab (tests/stockdut.py): Debian's OpenSSH and dropbear servers, busybox
# as the DUT's shell, and a cross toolchain (+ qemu-user to run what it builds) for DUT helpers
[ -x /usr/sbin/sshd ] || missing="$missing openssh-server"
command -v dropbear >/dev/null 2>&1 || [ -x /usr/sbin/dropbear ] || missing="$missing dropbear-bin"
command -v dropbearkey >/dev/null 2>&1 || [ -x /usr/bin/dropbearkey ] || missing="$missing dropbear-bin"
[ -x /bin/busybox ] || missing="$missing busybox"
need aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu
need qemu-aarch64 qemu-user
need unshare util-linux
# bubblewrap: every build of agent-written code runs confined (lab/host/sandbox.py)
need bwrap bubblewrap
# libseccomp: a build may not make a user namespace (a seccomp filter, lab/host/seccomp.py)
ldconfig -p 2>/dev/null | grep -q "libseccomp\.so\.2 " || missing="$missing libseccomp2"
# traffic studies: iperf3 is the load, nftables the rule sets (tests: two host namespaces
# joined by a veth pair, tests/netns_traffic.py)
need iperf3 iperf3; need nft nftables

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
    # openssh-server's postinst would start a system sshd on port 22: the tests start their own
    # on 127.0.0.1, so keep services from starting while installing (unless a policy already says)
    own_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
      own_policy=1
    fi
    apt-get update -qq
    [ -z "$missing" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    [ -z "$qlab" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $qlab >/dev/null
    [ -z "$own_policy" ] || rm -f /usr/sbin/policy-rc.d
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
