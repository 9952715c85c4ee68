"""What talks to the DUT: Device over one pinned-key SSH connection, process instances, the sampler,
uprobes, the datamodel count, and DUT-side C helpers. Imports nothing of lab/host or lab/knobs."""

from labwarden.lab.dut import sshlib

sshlib.load()  # before any module here imports asyncssh: see sshlib for why
