"""What a claimed row holds until its delivery ends, and the table of turn leases held."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Claimed", "Key", "Turn", "TurnTable"]

#: (profile name, session id) of a delivery in flight.
Key = tuple[str | None, str]


@dataclass
class Turn:
    """A conversation whose turn lease the watcher holds while it delivers (named for the
    delivery's holder, :func:`~hermes_state.plans.delivery_holder`)."""

    home: Path | None
    session_id: str
    holder: str


@dataclass
class Claimed:
    """What a claimed row's delivery must give back on every path."""

    key: Key
    home: Path | None
    reservation: object = None
    turn: Turn | None = None  # the turn lease it holds (its entry in the TurnTable)
    #: When its claim was last known to hold (claimed, or its lease renewed): monotonic time.
    renewed_at: float = field(default_factory=time.monotonic)


class TurnTable:
    """The turn leases the watcher holds for its deliveries, kept up until given back."""

    def __init__(self) -> None:
        self.turns: dict[Key, Turn] = {}

    def hold(self, claimed: Claimed, holder: str) -> None:
        """Note that ``claimed``'s delivery holds its conversation's turn lease for ``holder``."""
        claimed.turn = Turn(claimed.home, claimed.key[1], holder)
        self.turns[claimed.key] = claimed.turn

    def drop(self, claimed: Claimed) -> Turn | None:
        """Forget ``claimed``'s turn lease (given back, or left to expire); the one it held."""
        turn, claimed.turn = claimed.turn, None
        if turn is not None and self.turns.get(claimed.key) is turn:
            del self.turns[claimed.key]
        return turn

    def by_home(self) -> dict[Path | None, dict[Key, Turn]]:
        """The leases held, grouped by the profile home whose store keeps them."""
        grouped: dict[Path | None, dict[Key, Turn]] = {}
        for key, turn in list(self.turns.items()):
            grouped.setdefault(turn.home, {})[key] = turn
        return grouped

    def still_held(self, turns: dict[Key, Turn]) -> dict[Key, Turn]:
        """Those of ``turns`` no flush has given back meanwhile."""
        return {key: turn for key, turn in turns.items() if self.turns.get(key) is turn}
