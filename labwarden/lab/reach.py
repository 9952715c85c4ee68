"""What to do when the DUT does not answer, said for the kind of lab the profile describes:
the vlab and the qlab have commands that show and start them; a bench DUT has a power switch
and an address in the profile."""

from __future__ import annotations

from labwarden.lab.config import LabProfile


def unreachable_remedy(profile: LabProfile) -> str:
    if profile.lab.kind == "vlab":
        root = profile.dut.paths.root
        where = f" --dir {root}" if root else ""
        return (f"the vlab is down or restarting: `labwarden vlab status{where}` shows it, "
                f"`labwarden vlab up{where}` starts it (and check [dut.ssh] host/port in the "
                "lab profile); lab_status answers again once it is up")
    if profile.dut.backend == "labgrid":
        return ("power the board on (a qlab: `labwarden qlab status`, `labwarden qlab up`) and "
                "check its labgrid place; lab_status answers again once it boots")
    ssh = profile.dut.ssh
    addr = f"{ssh.user}@{ssh.host} port {ssh.port}" if ssh else "the DUT"
    return (f"power the DUT on and check that {addr} answers SSH ([dut.ssh] in the lab "
            "profile); lab_status answers again once it is up")
