"""The operator's dashboard: a web page, a JSON API, a live event stream and Prometheus metrics.

Needs the ``dashboard`` extra (``pip install 'hermes-state[dashboard]'``); importing
:mod:`hermes_state.dashboard.app` without it raises :class:`MissingExtraError`, which says so.
"""

from __future__ import annotations

from ..errors import MissingExtraError

__all__ = ["EXTRA_HINT", "MissingExtraError", "require_extra"]

EXTRA_HINT = "pip install 'hermes-state[dashboard]'"


def require_extra() -> None:
    """Raise :class:`MissingExtraError` naming the extra when one of its libraries is missing."""
    import importlib.util

    for module in ("starlette", "uvicorn", "jinja2", "prometheus_client"):
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(
                f"the dashboard needs {module.replace('_', '-')}, which is not installed: "
                f"run `{EXTRA_HINT}`"
            )
