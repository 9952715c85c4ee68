"""The lab model, by side: config (the lab profile), board state, knobs, dut/ (what talks to the DUT)
and host/ (what runs on the host), labgrid, measurement conditions."""
