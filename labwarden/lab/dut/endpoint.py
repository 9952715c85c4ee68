"""How to reach a DUT over SSH: the one shape every backend (ssh, labgrid, vlab) resolves to."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SshEndpoint(BaseModel):
    """An SSH endpoint of a DUT (address, login, pinned host key); backends differ only in how they
    find it. Not to be confused with `[target]` in the lab profile: that is the measured process."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(description="address of the DUT, e.g. 192.168.1.1 or 127.0.0.1")
    port: int = Field(22, ge=1, le=65535)
    user: str = Field("root")
    key: str = Field(description="path of the private key file used to log in")
    host_key: str | None = Field(
        None, description="the DUT's public host key ('ssh-ed25519 AAAA...'); pinned: any other "
        "key is refused. None only when the backend pins it another way (known_hosts).")
    known_hosts: str | None = Field(None, description="known_hosts file, if host_key is not given")
