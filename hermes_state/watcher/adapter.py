"""The adapter: a store's batch calls, made of its per-row calls when it has none.

The per-row calls are awaited one after another, as the store offers them: a synchronous store
reaches the watcher wrapped in :class:`~hermes_state.AsyncSessionDB`, which runs each call in a
worker thread, so the event loop never waits on the database either way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..plans import ClaimBatch, Row
from .host import StoreOffers, store_offers
from .settings import LOGGER_NAME

if TYPE_CHECKING:
    from ..surface import AsyncStore

__all__ = ["StoreCalls"]

logger = logging.getLogger(LOGGER_NAME)


class StoreCalls:
    """``db`` with the batch calls the watcher makes: claiming listed rows with their turn
    leases, recording outcomes (giving turn leases back in the same call), reading
    transcripts and refreshing turn leases. What the store offers is probed when this is made.
    """

    def __init__(self, db: AsyncStore) -> None:
        self.db = db
        self.offers: StoreOffers = store_offers(db)

    async def pending(self, limit: int | None) -> list[Row]:
        """The pending rows, oldest first: at most ``limit`` when the store can page (a tick
        never needs more), else all of them."""
        if limit is None or not self.offers.paged_listing:
            return list(await self.db.list_pending_handoffs())
        return list(await self.db.list_handoffs("pending", limit=limit))

    async def claim(
        self,
        rows: Sequence[Row],
        *,
        turn_holders: Mapping[str, str] | None,
        turn_seconds: float,
    ) -> ClaimBatch:
        """Claim those of ``rows`` still pending, each with its turn lease when
        ``turn_holders`` names a holder for it: the rows won (as claimed), and the ids left
        pending because their conversation's turn is taken.

        Made of single claims, a row's lease is taken before its claim and given back when the
        claim is lost or fails. A claim that fails after others were won ends the batch with
        what was won (the rest stay pending for the next tick); one that fails first raises.
        """
        if self.offers.batch_claims:
            ids = [row["id"] for row in rows]
            if turn_holders is None:
                return await self.db.claim_handoffs(ids)
            return await self.db.claim_handoffs(
                ids, turn_holders=turn_holders, turn_seconds=turn_seconds
            )
        won: list[Row] = []
        held: list[str] = []
        for row in rows:
            session_id = row["id"]
            holder = None if turn_holders is None else turn_holders.get(session_id)
            try:
                taken = await self._claim_one(session_id, holder, turn_seconds)
            except Exception:
                if not won:
                    raise
                logger.warning(
                    "could not claim %s; it stays pending for a later tick",
                    session_id,
                    exc_info=True,
                )
                break
            if taken is None:
                held.append(session_id)
            elif taken:
                won.append(dict(row))
        return ClaimBatch(won, held)

    async def _claim_one(self, session_id: str, holder: str | None, seconds: float) -> bool | None:
        """True: claimed (with its lease); False: lost; None: its conversation's turn is taken."""
        if holder is not None and self.offers.turn_leases:
            if not await self.db.try_acquire_session_turn_lease(
                session_id, holder, ttl_seconds=seconds
            ):
                logger.debug("%s: its conversation's turn is taken; later", session_id)
                return None
        else:
            holder = None
        try:
            won = bool(await self.db.claim_handoff(session_id))
        except BaseException:
            await self._release_turn(session_id, holder)
            raise
        if not won:
            await self._release_turn(session_id, holder)
        return won

    async def _release_turn(self, session_id: str, holder: str | None) -> None:
        if holder is None or not self.offers.turn_release:
            return
        try:
            await self.db.release_session_turn_lease(session_id, holder)
        except Exception:
            logger.warning(
                "could not release the turn lease of %s; it expires by itself",
                session_id,
                exc_info=True,
            )

    async def finish(
        self, outcomes: Mapping[str, str | None], *, release_turns: Mapping[str, str]
    ) -> dict[str, bool]:
        """Complete (``None``) or fail (an error) the running rows of ``outcomes`` and give up
        the turn leases ``release_turns`` names: ``{id: recorded}``, False when the row's
        claim was lost meanwhile.

        Made of single calls, an outcome that cannot be recorded is logged and left out of the
        answer (not recorded: the row stays running until reclaimed); a store that answers
        None has recorded it (stand-ins of the original surface answer nothing).
        """
        if self.offers.batch_finish:
            return await self.db.finish_handoffs(outcomes, release_turns=release_turns or None)
        done: dict[str, bool] = {}
        for session_id, error in outcomes.items():
            what = "completion" if error is None else "failure"
            try:
                if error is None:
                    recorded: object = await self.db.complete_handoff(session_id)
                else:
                    recorded = await self.db.fail_handoff(session_id, error)
            except Exception:
                logger.exception(
                    "could not record the %s of %s; it stays running until reclaimed",
                    what,
                    session_id,
                )
                continue
            done[session_id] = recorded is not False
        for session_id, holder in release_turns.items():
            await self._release_turn(session_id, holder)
        return done

    async def documents(self, rows: list[Row]) -> list[Row]:
        """The claimed rows, each with its transcript under ``messages``: in one read when the
        store can (the claim's rows, filled in place), else the row as the store has it now
        (when it can tell) and its messages (none when it cannot)."""
        if self.offers.transcripts:
            transcripts = await self.db.get_transcripts([row["id"] for row in rows])
            for row in rows:
                row["messages"] = list(transcripts.get(row["id"], []))
            return rows
        return [await self._document(row) for row in rows]

    async def _document(self, row: Row) -> Row:
        session_id = row["id"]
        claimed = await self.db.get_session(session_id) if self.offers.sessions else None
        document = dict(claimed if claimed is not None else row)
        messages = await self.db.get_messages(session_id) if self.offers.messages else []
        document["messages"] = list(messages)
        return document

    async def refresh_turns(self, holders: Mapping[str, str], *, ttl_seconds: float) -> list[str]:
        """Extend the turn leases ``holders`` names (``{id: holder}``); the ids whose lease
        another holder has now. One whose refresh fails is logged and tried again next time."""
        if self.offers.turn_refresh_many:
            kept = set(await self.db.refresh_session_turn_leases(holders, ttl_seconds=ttl_seconds))
            return [session_id for session_id in holders if session_id not in kept]
        if not self.offers.turn_refresh:
            return []
        lost = []
        for session_id, holder in holders.items():
            try:
                kept_one = await self.db.refresh_session_turn_lease(
                    session_id, holder, ttl_seconds=ttl_seconds
                )
            except Exception:
                logger.warning("could not refresh the turn lease of %s", session_id, exc_info=True)
                continue
            if kept_one is False:
                lost.append(session_id)
        return lost
