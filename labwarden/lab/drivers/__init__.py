"""Drivers chosen by the lab profile, labgrid-style: a small Protocol per role, one module per
implementation, selected by the section's `kind` key.

- load/: who holds the DUT's clients (`[load] kind`): stasim (the vlab), none, command;
- flash/: how a build's image gets onto the DUT (`[flash] kind`): vlab, sysupgrade, command,
  labgrid.

Each role's `__init__` keeps a registry of kinds (`DRIVERS`); a new kind (wpa_supplicant
stations, iperf3 traffic) is a module, a config model in the section's union, and a registry
entry -- nothing that uses the role changes.
"""
