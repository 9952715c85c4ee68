"""asyncssh, imported with its native-library probe limited to the linker's cache.

At import, asyncssh looks for liboqs (post-quantum KEMs) and nettle (UMAC) with
`ctypes.util.find_library`. On Linux, a library the linker cache (`ldconfig -p`) does not list
makes find_library compile a test program with gcc and then run ld -- for liboqs twice ('oqs',
'liboqs'), and Debian has no liboqs package: ~30 ms of every labwarden command
(bench/startup.py). A library installed the ordinary way is in that cache, so while asyncssh
loads, the probe asks the cache only. With LD_LIBRARY_PATH set (a library installed outside the
cache) the standard probe runs. Every later find_library is the standard one.
"""

from __future__ import annotations

import ctypes.util
import os
import sys


def load() -> None:
    """Import asyncssh (once, before any module of this package uses it)."""
    if "asyncssh" in sys.modules:
        return
    cache_only = getattr(ctypes.util, "_findSoname_ldconfig", None)  # CPython's, on Linux
    if cache_only is None or not sys.platform.startswith("linux") or os.environ.get("LD_LIBRARY_PATH"):
        import asyncssh
        return
    standard = ctypes.util.find_library
    ctypes.util.find_library = cache_only
    try:
        import asyncssh  # noqa: F401
    finally:
        ctypes.util.find_library = standard
