"""Upstream's ``hermes_state_errors`` names, for code written against upstream's store: its
callers import the turn-lease error from here."""

from hermes_state.errors import HermesStateError, SessionTurnLeaseLostError

__all__ = ["HermesStateError", "SessionTurnLeaseLostError"]
