"""Upstream's ``hermes_state_session_scope`` names, for code written against upstream's store:
the row check of ``scope="own"`` (a Telegram direct message with the requester)."""

from hermes_state.plans.session_listing import SCOPES, session_row_is_own_dm

__all__ = ["SCOPES", "session_row_is_own_dm"]
