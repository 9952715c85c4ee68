"""Keep the DUT lease while a call runs: a background task renews it every third of the TTL, so a
sweep longer than the TTL is never taken over mid-window (it was, when the lease was renewed
only as a call started). The task ends with the call; a renewal that finds the lease gone is
logged (the call goes on: stopping a measurement midway would leave the DUT worse off)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from labwarden.core.errors import LabError
from labwarden.core.spec import ToolSpec

if TYPE_CHECKING:
    from labwarden.guardrails.guard import Guard

log = logging.getLogger(__name__)


async def _keep(guard: Guard, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        if not guard.lease.held:  # handed back on purpose (a fleet place released): nothing lost
            return
        try:
            if not await guard.lease.renew():
                log.warning("the DUT lease was lost while a call ran (taken over after it expired)")
                return
        except LabError as exc:  # the DUT did not answer this time: try again next period
            log.warning("renewing the DUT lease failed: %s", exc.problem)


def renews(guard: Guard, spec: ToolSpec) -> bool:
    """Whether a call of `spec` keeps the lease while it runs: it holds it, and needs it."""
    return guard.lease.held and ("lease" in spec.requires
                                 or spec.effect in ("mutates_dut", "destructive"))


@contextlib.asynccontextmanager
async def lease_renewal(guard: Guard, spec: ToolSpec) -> AsyncIterator[None]:
    """Renew the lease in the background while the body runs, if this call holds it."""
    if not renews(guard, spec):
        yield
        return
    task = asyncio.create_task(_keep(guard, max(0.5, guard.lease.ttl_s / 3)))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
