"""Sources of small helpers that run on the DUT (plain C, libc only), built by lab/duthelpers.py."""
