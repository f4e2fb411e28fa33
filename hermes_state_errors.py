"""Upstream's ``hermes_state_errors`` names, for code written against upstream's store: its
callers import the transcript-write errors from here."""

from hermes_state.errors import (
    CompressionSessionClosedError,
    HermesStateError,
    SessionTurnLeaseLostError,
)

__all__ = ["CompressionSessionClosedError", "HermesStateError", "SessionTurnLeaseLostError"]
