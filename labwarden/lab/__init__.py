"""The lab model: profile, Device, backends, load generators, symfs, and DUT-side readers."""
