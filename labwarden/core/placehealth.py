"""Per-place health of a fleet as LAVA keeps it: good, unknown or bad, with the reason and since
when. Kept in DATA/fleet/health.json (one record per place); a bad place stays bad until a
person clears it (`labwarden lab clear-bad --place NAME`: it becomes unknown and must prove
itself again), whatever later calls elsewhere do."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

HealthState = Literal["good", "unknown", "bad"]


class PlaceState(BaseModel):
    """One place's health as this data dir keeps it (LAVA's states: bad needs a person)."""

    place: str
    state: HealthState
    reason: str | None = None
    since: datetime
    cleared_by: str | None = Field(None, description="the person who last cleared it from bad")


class HealthStore:
    """DATA/fleet/health.json: place -> its health. Written whole on each change (small)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "fleet" / "health.json"

    def all(self) -> dict[str, PlaceState]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        return {k: PlaceState.model_validate(v) for k, v in raw.items()}

    def get(self, place: str) -> PlaceState:
        return self.all().get(place) or PlaceState(place=place, state="unknown",
                                                   since=datetime.now(UTC))

    def bad(self) -> set[str]:
        return {k for k, v in self.all().items() if v.state == "bad"}

    def mark(self, place: str, state: HealthState, reason: str | None) -> bool:
        """Record the place's health; True when it changed. A bad place is never marked good
        by a call (a person clears it)."""
        known = self.all()
        old = known.get(place)
        if old is not None and (old.state, old.reason) == (state, reason):
            return False
        if old is not None and old.state == "bad" and state != "bad":
            return False
        known[place] = PlaceState(place=place, state=state, reason=reason, since=datetime.now(UTC),
                                  cleared_by=old.cleared_by if old is not None else None)
        self._write(known)
        return True

    def clear(self, place: str, by: str, reason: str = "") -> PlaceState:
        """A person clears a bad place: it becomes unknown, with who cleared it and why; the
        fleet leases it again, and its next call proves it (good) or finds it bad again.
        NotBad when it is not bad (nothing to clear)."""
        known = self.all()
        old = known.get(place)
        if old is None or old.state != "bad":
            raise NotBad(place, old)
        known[place] = PlaceState(place=place, state="unknown", since=datetime.now(UTC), cleared_by=by,
                                  reason=f"cleared by {by}" + (f": {reason}" if reason else "")
                                  + f" (was bad: {old.reason or 'no reason'}); it must prove itself again")
        self._write(known)
        return known[place]

    def _write(self, known: dict[str, PlaceState]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({k: v.model_dump(mode="json") for k, v in sorted(known.items())},
                                  indent=2) + "\n")
        tmp.replace(self.path)


class NotBad(Exception):
    """Clearing a place that is not bad: `state` is its record (None: it has none yet)."""

    def __init__(self, place: str, state: PlaceState | None) -> None:
        super().__init__(f"{place} is {state.state if state else 'unknown (no record)'}, not bad")
        self.place, self.state = place, state


