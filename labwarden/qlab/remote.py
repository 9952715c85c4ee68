"""labwarden's side of the qlab's labgrid target: a Strategy that drives qlabd's, not QEMU.

The qlab's QEMUDriver lives in qlabd (daemon.py): a QEMUDriver in labwarden's process would
start a second QEMU on the same disks. So the env YAML that labwarden loads (the lab profile's
[dut.labgrid] env, `client-env.yaml`, written by envyaml.write) names no QEMUDriver: it has the
NetworkService and SSHDriver, a `QlabdControl` resource (qlabd's control socket) and this
`QlabdStrategy`, whose transitions ask qlabd to run its real QlabStrategy (strategy.py):

    off    qlabd: QEMUDriver off
    shell  from any other state: qlabd powers the target off, writes `images.<image>` to the
           flash disk if the env names one (what `[flash] kind = "labgrid"` sets), and moves it
           to shell (QEMUDriver on, dropbear answers); no image: a power cycle

A strategy object starts `unknown` (labwarden builds a fresh target for each transition), so
`transition("shell")` always boots the guest again: a new boot_id, as on a bench whose
strategy power-cycles the board. A build's image.tar.gz is packed on the host into the flash
format (firmware.pack, the same bytes for the same build) before qlabd is asked; qlabd checks
it again before it stops QEMU.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import attr
from labgrid.factory import target_factory
from labgrid.resource.common import Resource
from labgrid.step import step
from labgrid.strategy.common import Strategy, StrategyError, never_retry

from labwarden.lab.host.builder import BuildManifest
from labwarden.qlab import ctlsock, firmware


@target_factory.reg_resource
@attr.s(eq=False)
class QlabdControl(Resource):
    """qlabd's control socket (a path; relative paths resolve against the env YAML)."""

    path: str = attr.ib(validator=attr.validators.instance_of(str))
    timeout: float = attr.ib(default=600.0, converter=float)
    """How long one request (a boot under TCG, a flash) may take."""


class Status(enum.Enum):
    unknown = 0
    off = 1
    shell = 2


@target_factory.reg_driver
@attr.s(eq=False)
class QlabdStrategy(Strategy):
    """Moves the qlab between off and shell through qlabd; flashes `images.<image>` on the way
    to shell if the env names it. `boot_id` is the guest's after the last boot."""

    bindings = {"control": "QlabdControl"}  # noqa: RUF012 (labgrid's idiom)

    status: Status = attr.ib(default=Status.unknown)
    image: str = attr.ib(default="root", validator=attr.validators.instance_of(str))
    """The key in the env's images: that `transition("shell")` writes to the flash disk."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.boot_id: str | None = None
        self.flashed: str | None = None

    def _socket(self) -> str:
        return str(self.target.env.config.resolve_path(self.control.path))

    def _ask(self, op: str, image: str | None = None) -> dict[str, Any]:
        request = ctlsock.Request.model_validate({"op": op, "image": image})
        reply = ctlsock.ask(self._socket(), request, timeout=self.control.timeout)
        if not reply.ok:
            raise StrategyError(f"qlabd refused or failed `{op}`: {reply.error}")
        return reply.state

    def _image(self) -> str | None:
        images = self.target.env.config.data.get("images") or {}
        if self.image not in images:
            return None
        path = Path(self.target.env.config.get_image_path(self.image))
        if path.name.endswith(".tar.gz"):  # a build's image: its flash-format twin beside it
            manifest = path.with_name("manifest.json")
            if not manifest.is_file():
                raise StrategyError(f"images.{self.image} = {path}: a tar image without its build's "
                                    "manifest.json beside it (flash a build's image)")
            path = firmware.pack(BuildManifest.model_validate_json(manifest.read_text()))
        return str(path)

    @never_retry
    @step(args=["status"])
    def transition(self, status: Status | str, *, step: Any) -> None:
        if not isinstance(status, Status):
            status = Status[status]
        if status == Status.unknown:
            raise StrategyError(f"can not transition to {status}")
        if status == self.status:
            step.skip("nothing to do")
            return
        if status == Status.off:
            self._ask("off")
            self.boot_id = None
        else:
            image = self._image()
            state = self._ask("flash", image) if image else self._ask("cycle")
            self.boot_id, self.flashed = state.get("boot_id"), image
        self.status = status
