"""The plans that write a session row: create (upsert), end, reopen, prompt, model, usage."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from .. import statements
from ..statements import Capabilities
from ..validation import (
    NAME_LENGTH,
    require_fields,
    require_identifier,
    require_text,
    require_usage,
)
from .core import Body, Plan, Row, Step
from .reads import _done


def prompt_hash(prompt: str) -> str:
    """The key of a prompt in ``system_prompts``, as upstream computes it."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def _key_namespace(session_key: str) -> str:
    """The ``agent:<profile>:`` part of a gateway session key (upstream's SQL reads the text
    up to the first colon after the sixth character)."""
    end = session_key.find(":", 6)
    return session_key[: end + 1] if end >= 0 else session_key[:6]


def _inherited(child: Row, parent: Row) -> dict[str, Any]:
    """What ``child`` takes from ``parent``: its place (cwd, git, profile) always, its gateway
    route only as a compression continuation. Only NULL columns change (the statement says
    so); a NULL here changes nothing."""
    values: dict[str, Any] = {name: parent[name] for name in statements.INHERITED}
    keys = (child["session_key"], parent["session_key"])
    if None not in keys and _key_namespace(keys[0]) != _key_namespace(keys[1]):
        values["profile_name"] = None  # another profile's row must not be labelled as this one
    routed = parent["end_reason"] == statements.COMPRESSION  # a continuation: its route too
    for name in statements.INHERITED_ROUTE:
        values[name] = parent[name] if routed else None
    return values


def _inherit(params: Mapping[str, Any]) -> Body[None]:
    found = yield Step(statements.session_and_parent(), params)
    rows = {row["id"]: row for row in found.rows}
    child, parent = rows.get(params["id"]), rows.get(params["parent_session_id"])
    if child is None or parent is None or child is parent:
        return
    values = _inherited(child, parent)
    if any(value is not None for value in values.values()):
        yield Step(statements.inherit_session(), {"session_id": params["id"], **values})


#: What :func:`statements.fill_session` binds, besides the id.
_FILLED = ("source", "system_prompt_hash", *statements.KEPT_FIRST)


def _create_session(caps: Capabilities, params: Mapping[str, Any]) -> Body[str]:
    values = dict(params)
    prompt = values.pop("system_prompt")
    values["system_prompt"] = None
    values["system_prompt_hash"] = None if prompt is None else prompt_hash(prompt)
    if prompt is not None:
        prompt_row = {"hash": values["system_prompt_hash"], "prompt": prompt}
        yield Step(statements.store_system_prompt(caps.name), prompt_row)
    inserted = yield Step(statements.insert_session(caps.name), values)
    existed = caps.name in ("mysql", "mariadb") and inserted.rowcount == 0
    if existed:
        filled = {**_only(values, _FILLED), "session_id": values["id"]}
        yield Step(statements.fill_session(), filled)
    if prompt is not None and (existed or caps.name not in ("mysql", "mariadb")):
        # An existing row keeps its own prompt; the one just stored may be nobody's.
        yield Step(statements.forget_system_prompt(), {"old_hash": values["system_prompt_hash"]})
    if values["parent_session_id"] is not None:
        yield from _inherit(values)
    return str(values["id"])


def _only(values: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The parameters an UPDATE binds, and only those: SQLAlchemy turns any other parameter
    named after a column into one more ``SET`` of that column."""
    return {name: values[name] for name in names}


def _session_update(
    statement: Any, names: tuple[str, ...], after: Callable[[Row], Mapping[str, Any]] | None = None
) -> Callable[[Capabilities, Mapping[str, Any]], Body[None]]:
    """The body of a write that reads the row's prompt hash and config (locked), stores the
    new prompt if it brings one, runs ``statement`` with the parameters (and what ``after``
    derives from the row), then drops the prompt the row no longer points at. Nothing is
    written for an unknown session."""

    def body(caps: Capabilities, params: Mapping[str, Any]) -> Body[None]:
        found = yield Step(statements.session_prompt_and_config(), params)
        if not found.rows:
            return
        row = found.rows[0]
        values = {**params, **(after(row) if after else {})}
        new = values.get("system_prompt_hash")
        if new is not None:
            prompt = {"hash": new, "prompt": values["system_prompt"]}
            yield Step(statements.store_system_prompt(caps.name), prompt)
        yield Step(statement, _only(values, names))
        old = row["system_prompt_hash"]
        if old is not None and old != new:
            yield Step(statements.forget_system_prompt(), {"old_hash": old})

    return body


def _merged_config(text: Any, patch: Mapping[str, Any]) -> str | None:
    """``model_config`` with ``patch`` applied (None removes a key), as JSON text or NULL;
    unreadable stored text counts as empty, as upstream reads it."""
    try:
        config = json.loads(text) if isinstance(text, str) and text.strip() else {}
    except ValueError:
        config = {}
    if not isinstance(config, dict):
        config = {}
    for key, value in patch.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return json.dumps(config) if config else None


_UPDATE_SYSTEM_PROMPT = _session_update(
    statements.set_system_prompt(), ("session_id", "system_prompt_hash")
)


def _update_tokens(caps: Capabilities, params: Mapping[str, Any]) -> Body[None]:
    yield from _create_session(caps, params["session"])
    found = yield Step(statements.usage_route(), params)
    if not found.rows:
        return
    row, usage = found.rows[0], params["usage"]
    if (
        params["accounted"]
        and not row["api_call_count"]
        and usage["model"]
        and usage["billing_provider"]
        and (row["model"], row["billing_provider"]) != (usage["model"], usage["billing_provider"])
    ):
        route = _only(usage, statements.ROUTE_FIELDS)
        yield Step(statements.set_usage_route(), {"session_id": params["session_id"], **route})
        row = {**row, **{name: usage[name] for name in statements.ROUTE_FIELDS}}
    yield Step(statements.count_tokens(params["absolute"]), params["counts"])
    if params["absolute"] or not params["has_usage"]:
        return
    route = {name: usage[name] or row[name] or "" for name in statements.ROUTE_FIELDS}
    route["model"] = route["model"] or "unknown"
    record = {
        **params["record"],
        **route,
        "first_seen": params["now"],
        "last_seen": params["now"],
    }
    yield Step(statements.record_model_usage(caps.name), record)


class SessionWritePlans:
    """The session-row writes of :class:`~hermes_state.plans.PlanBook`."""

    clock: Callable[[], float]

    def _session_values(
        self, session_id: object, source: object, fields: Mapping[str, object]
    ) -> dict[str, Any]:
        values: dict[str, Any] = dict.fromkeys(statements.SESSION_FIELDS)
        values["started_at"] = self.clock()
        values.update(require_fields(fields))
        values["id"] = require_identifier("session_id", session_id)
        values["source"] = require_identifier("source", source, max_length=NAME_LENGTH)
        return values

    def create_session(self, session_id: object, source: object, **fields: object) -> Plan[str]:
        values = self._session_values(session_id, source, fields)
        single = values["system_prompt"] is None and values["parent_session_id"] is None
        return Plan(_create_session, values, writes=True, single_statement=single)

    def ensure_session(
        self, session_id: object, source: object = "unknown", model: object = None, **fields: object
    ) -> Plan[str]:
        return self.create_session(session_id, source, model=model, **fields)

    def end_session(self, session_id: object, end_reason: object) -> Plan[None]:
        params = {
            "session_id": require_identifier("session_id", session_id),
            "end_reason": require_text("end_reason", end_reason),
            "now": self.clock(),
        }
        return Plan(_done, statements.end_session(), params, writes=True)

    def reopen_session(self, session_id: object) -> Plan[None]:
        params = {"session_id": require_identifier("session_id", session_id)}
        return Plan(_done, statements.reopen_session(), params, writes=True)

    def update_system_prompt(self, session_id: object, system_prompt: object) -> Plan[None]:
        prompt = require_text("system_prompt", system_prompt)
        params = {
            "session_id": require_identifier("session_id", session_id),
            "system_prompt": prompt,
            "system_prompt_hash": None if prompt is None else prompt_hash(prompt),
        }
        return Plan(_UPDATE_SYSTEM_PROMPT, params, writes=True, single_statement=False)

    def update_session_model(
        self, session_id: object, model: object, provider: object = None
    ) -> Plan[None]:
        model_name = require_identifier("model", model)
        provider_name = None if provider is None else require_identifier("provider", provider)
        patch: dict[str, Any] = {"browser_model_lock": None, "model": model_name}
        if provider_name:
            patch["provider"] = provider_name

        def merged(row: Row) -> dict[str, Any]:
            return {"model_config": _merged_config(row["model_config"], patch)}

        params = {"session_id": require_identifier("session_id", session_id), "model": model_name}
        names = ("session_id", "model", "model_config")
        body = _session_update(statements.set_session_model(), names, merged)
        return Plan(body, params, writes=True, single_statement=False)

    def update_token_counts(
        self,
        session_id: object,
        input_tokens: object = 0,
        output_tokens: object = 0,
        model: object = None,
        cache_read_tokens: object = 0,
        cache_write_tokens: object = 0,
        reasoning_tokens: object = 0,
        estimated_cost_usd: object = None,
        actual_cost_usd: object = None,
        cost_status: object = None,
        cost_source: object = None,
        pricing_version: object = None,
        billing_provider: object = None,
        billing_base_url: object = None,
        billing_mode: object = None,
        api_call_count: object = 0,
        absolute: object = False,
    ) -> Plan[None]:
        report = require_usage(
            counts={
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "cache_read_tokens": cache_read_tokens,
                "cache_write_tokens": cache_write_tokens,
                "reasoning_tokens": reasoning_tokens,
                "api_call_count": api_call_count,
            },
            costs={
                "estimated_cost_usd": estimated_cost_usd,
                "actual_cost_usd": actual_cost_usd,
                "cost_status": cost_status,
                "cost_source": cost_source,
                "pricing_version": pricing_version,
            },
            route={
                "model": model,
                "billing_provider": billing_provider,
                "billing_base_url": billing_base_url,
                "billing_mode": billing_mode,
            },
            absolute=absolute,
        )
        identifier = require_identifier("session_id", session_id)
        session = self._session_values(identifier, "unknown", {"model": report.route["model"]})
        route = {
            f"route_{name}": value if report.accounted else None
            for name, value in report.route.items()
        }
        costs = report.costs
        params = {
            "session_id": identifier,
            "session": session,
            "usage": report.route,
            "accounted": report.accounted,
            "absolute": report.absolute,
            "has_usage": report.has_usage,
            "now": session["started_at"],
            "counts": {"session_id": identifier, **report.counts, **costs, **route},
            "record": {
                "session_id": identifier,
                "task": "",
                **report.counts,
                "estimated_cost_usd": float(costs["estimated_cost_usd"] or 0.0),
                "actual_cost_usd": float(costs["actual_cost_usd"] or 0.0),
                "cost_status": costs["cost_status"],
                "cost_source": costs["cost_source"],
            },
        }
        return Plan(_update_tokens, params, writes=True, single_statement=False)
