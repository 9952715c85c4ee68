"""What runs on the host: the firmware builder, symfs and folded stacks, this host's tracefs, the
station simulator, pid files and host programs. May pull files from the DUT through lab/dut."""
