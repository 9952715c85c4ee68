"""A seccomp filter that keeps a build from making a user namespace (and from it, capabilities)
and from taking disk faster than it writes.

bwrap 0.8.0's `--disable-userns` works only with `--unshare-user`, and the server (root) runs
builds without a user namespace (it drops to the build's uid with setpriv). Inside, `unshare -U -r`
would otherwise give the build every capability in a namespace of its own (nf_tables, mounts).
So bwrap loads this filter (`--seccomp FD`) just before it execs the build command, which no
process of the build can lift:
- `unshare` and `clone` with CLONE_NEWUSER -> EPERM (what flatpak does);
- `clone3` -> ENOSYS: its flags are in memory a filter cannot read, and on ENOSYS glibc falls
  back to `clone`, which is checked;
- `fallocate` -> EFBIG past the build's disk limit (the file could never fit), EOPNOTSUPP
  otherwise: an allocation takes disk at once (8 GB in ~30 ms here), faster than any watcher of
  the build's disk use can act; refused, space is taken only as fast as data is written
  (glibc's posix_fallocate falls back to writing on EOPNOTSUPP);
- `io_uring_setup` -> ENOSYS (its requests, fallocate among them, pass no seccomp filter);
- every other syscall allowed. The rules cover the x86 and x32 ABIs as well as x86-64 (a 32-bit
  binary's int 0x80 is no way around them).
Generated with libseccomp (through the ctypes wrapper pyseccomp) rather than hand-written BPF.
"""

from __future__ import annotations

import errno
import os
import platform

import pyseccomp as seccomp

CLONE_NEWUSER = 0x10000000

_COMPANIONS = {"x86_64": (seccomp.Arch.X86, seccomp.Arch.X32),
               "aarch64": (seccomp.Arch.ARM,)}
"""ABIs the native kernel also runs, so the rules are added for them too."""


def build_filter(disk_bytes: int) -> int:
    """A memfd holding the filter as BPF, at offset 0 (for bwrap's `--seccomp FD`). The caller
    passes it to bwrap and closes it. `disk_bytes`: the build's disk limit."""
    f = seccomp.SyscallFilter(seccomp.ALLOW)
    for arch in _COMPANIONS.get(platform.machine(), ()):
        f.add_arch(arch)
    newuser = seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)
    f.add_rule(seccomp.ERRNO(errno.EPERM), "unshare", newuser)
    f.add_rule(seccomp.ERRNO(errno.EPERM), "clone", newuser)
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    # two disjoint conditions on the length (on the x86 ABI arg 3 is half of another argument:
    # whichever matches, fallocate is refused)
    f.add_rule(seccomp.ERRNO(errno.EFBIG), "fallocate", seccomp.Arg(3, seccomp.GT, disk_bytes))
    f.add_rule(seccomp.ERRNO(errno.EOPNOTSUPP), "fallocate",
               seccomp.Arg(3, seccomp.LE, disk_bytes))
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "io_uring_setup")
    fd = os.memfd_create("labwarden-seccomp")  # close-on-exec: Popen(pass_fds=) hands it on
    try:
        with os.fdopen(os.dup(fd), "wb", buffering=0) as sink:
            f.export_bpf(sink)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
