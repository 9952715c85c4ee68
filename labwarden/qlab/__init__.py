"""The qlab: a DUT that is a real Linux kernel under QEMU, run as a labgrid target.

A Debian kernel and a minimal Debian root built from packages (image.py, cached outside git), six
mac80211_hwsim AP radios with hostapd and wpa_supplicant stations in a `clients` netns (the guest
files under guest/), the vlab's firmware built with the nl80211 HAL and flashed as a root
filesystem image (firmware.py), dropbear for SSH. labgrid holds the target (envyaml.py,
strategy.py) in a daemon of its own (daemon.py); control.py brings it up and down and writes the
lab profile (profile_writer.py).
"""
