"""The virtual lab: a DUT made of real processes, real SSH and a real build; only radios are simulated."""
