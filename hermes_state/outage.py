"""How a long-running loop lives through a database outage: few log lines, growing pauses.

An :class:`Outage` follows one thing that keeps talking to the database (the watcher's poll
of a store, its lease upkeep, a LISTEN connection). Each failure returns the pause before the
next try, doubling up to a ceiling and jittered (between half and all of it, so that the
gateways of a cluster do not retry in step); the log gets one WARNING when the trouble
starts, one every ``report_every`` seconds while it lasts (with the number of failed tries),
and one when it is over, saying how long it lasted. The traceback is only
logged at DEBUG level (``--verbose``), except for an error that is not the database's (a bug
deserves its traceback once).
"""

from __future__ import annotations

import logging
import random
import re
import time
from dataclasses import dataclass, field
from typing import Final

from .errors import DatabaseUnavailableError, HermesStateError, NotADatabaseError, translate

__all__ = ["BACKOFF_CEILING", "REPORT_EVERY", "Outage", "one_line", "unavailable"]

#: The longest pause between two tries while the database stays away (seconds).
BACKOFF_CEILING: Final = 2.0
#: While it stays away: one reminder this often (seconds).
REPORT_EVERY: Final = 30.0
_WHITESPACE: Final = re.compile(r"\s+")


def one_line(exc: BaseException) -> str:
    """An error's message on one line (driver messages span several)."""
    text = _WHITESPACE.sub(" ", str(exc)).strip()
    return text or type(exc).__name__


def unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database is away (down, unreachable, or accepting no writes
    during a failover) rather than refusing for good (a file that is not a database)."""
    error = exc if isinstance(exc, DatabaseUnavailableError) else translate(exc, where="")
    return isinstance(error, DatabaseUnavailableError) and not isinstance(error, NotADatabaseError)


def _the_databases(exc: BaseException) -> bool:
    """Whether ``exc`` is the database's (or the network's) doing rather than a bug."""
    if isinstance(exc, HermesStateError | OSError):
        return True
    return translate(exc, where="the database") is not None


@dataclass
class Outage:
    """The state of one loop's trouble with the database (see the module docstring)."""

    what: str
    logger: logging.Logger
    first_delay: float = 0.2
    ceiling: float = BACKOFF_CEILING
    report_every: float = REPORT_EVERY
    failures: int = 0
    since: float | None = None
    _reported_at: float = 0.0
    _ceiling_now: float = field(default=0.0, repr=False)

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException) -> float:
        """Note a failed try; the seconds to wait before the next one."""
        now = time.monotonic()
        self.failures += 1
        ours = _the_databases(exc)
        verbose = self.logger.isEnabledFor(logging.DEBUG)
        if self.since is None:
            self.since = self._reported_at = now
            self._ceiling_now = self.first_delay
            self.logger.warning(
                "%s failed: %s; retrying with backoff (up to %gs apart)",
                self.what,
                one_line(exc),
                self.ceiling,
                exc_info=verbose or not ours,
            )
        elif now - self._reported_at >= self.report_every:
            self._reported_at = now
            self.logger.warning(
                "%s still failing after %.0fs (%d failed tries): %s",
                self.what,
                now - self.since,
                self.failures,
                one_line(exc),
                exc_info=verbose,
            )
        elif verbose:
            self.logger.debug("%s failed again: %s", self.what, one_line(exc), exc_info=True)
        delay = random.uniform(self._ceiling_now / 2, self._ceiling_now)
        self._ceiling_now = min(self.ceiling, self._ceiling_now * 2)
        return delay

    def succeeded(self) -> None:
        """Note a try that worked: the trouble (if any) is over."""
        if self.since is None:
            return
        self.logger.warning(
            "%s works again after %.1fs (%d failed tries)",
            self.what,
            time.monotonic() - self.since,
            self.failures,
        )
        self.since = None
        self.failures = 0
