"""Contention: 8 processes hammer one SQLite file with a random mix of operations.

Each process (half with an owner, some leased, half without) runs a fixed number of random
operations — requests, retries, claims, completions, failures with and without
``only_states``, renewals, reclaims of every scope, session creation, transcript appends and
reads — on a few hot sessions, and logs every result. Then:

* no process saw any error (in particular no unhandled ``database is locked``);
* the audit trail, replayed in commit order (its ids), is a valid history of the state
  machine, and the sessions table holds exactly the state that history ends in;
* each process's successful transitions, session by session, are exactly the events that name
  it as actor, in the same order (so every event corresponds to one logged success and every
  logged success to one event); appends and created sessions match the tables too.

Each run draws a seed for the workers' choices and names it in any failure; set
``HERMES_STATE_CONTENTION_SEED`` to replay those choices (the interleaving is up to the OS).
The longer soak is opt-in:

    pytest -m slow tests/processes/test_contention.py
"""

from __future__ import annotations

import json
import os
import random
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from hermes_state import SessionDB
from hermes_state.plans import STRANDED_ERROR
from tests.support.digest import sync_url
from tests.support.processes import FORKSERVER

PROCESSES = 8
HOT = tuple(f"hot-{n}" for n in range(6))
LATE = tuple(f"late-{n}" for n in range(4))
PLATFORMS = ("telegram", "discord", "slack")
ERRORS = ("boom", "403 Forbidden", "ünïcödé failure 🚀")
WAIT = 300.0  # seconds; a safety net against a hung worker, never a synchronisation tool


def identity(worker: int) -> dict[str, Any]:
    """Even workers are gateways with an owner (every other one leased); odd ones have none."""
    owner = f"gw-{worker}" if worker % 2 == 0 else None
    lease = 3600.0 if worker % 4 == 0 else None
    return {"actor": f"w{worker}", "owner": owner, "lease_seconds": lease}


# -- the worker process ---------------------------------------------------------------------


class Worker:
    """One process's store, its random choices, and the log of what succeeded."""

    def __init__(self, store: SessionDB, seed: int) -> None:
        self.db = store
        self.rng = random.Random(seed)
        self.held: list[str] = []  # rows this worker's claims won and it has not finished
        self.log: list[dict[str, Any]] = []

    def note(self, op: str, result: Any, **args: Any) -> None:
        self.log.append({"op": op, "result": result, **args})

    def some_session(self) -> str:
        if self.held and self.rng.random() < 0.5:
            return self.rng.choice(self.held)
        return self.rng.choice(HOT)

    def step(self) -> None:
        rng, db = self.rng, self.db
        op = rng.choices(
            [
                "request",
                "retry",
                "claim",
                "complete",
                "fail",
                "renew",
                "reclaim",
                "create",
                "append",
                "read",
            ],
            weights=[20, 8, 20, 15, 10, 4, 3, 4, 8, 8],
        )[0]
        if op == "request":
            sid, platform = rng.choice(HOT), rng.choice(PLATFORMS)
            self.note(op, db.request_handoff(sid, platform), sid=sid, platform=platform)
        elif op == "retry":
            sid, platform = rng.choice(HOT), rng.choice((None, *PLATFORMS))
            self.note(op, db.retry_handoff(sid, platform), sid=sid, platform=platform)
        elif op == "claim":
            sid = rng.choice(HOT)
            won = db.claim_handoff(sid)
            if won:
                self.held.append(sid)
            self.note(op, won, sid=sid)
        elif op == "complete":
            sid = self.some_session()
            self.note(op, db.complete_handoff(sid), sid=sid)
            self.forget(sid)
        elif op == "fail":
            sid, error = self.some_session(), rng.choice(ERRORS)
            only = rng.choice([None, ["pending"], ["running"]])
            result = db.fail_handoff(sid, error, only_states=only)
            self.note(op, result, sid=sid, error=error, only_states=only)
            self.forget(sid)
        elif op == "renew":
            self.note(op, db.renew_handoff_leases(list(self.held)), sids=list(self.held))
        elif op == "reclaim":
            scope = rng.choice(["stale", "expired", "all"])
            method = {
                "stale": db.reclaim_stale_running_handoffs,
                "expired": db.reclaim_expired_handoffs,
                "all": db.reclaim_running_handoffs,
            }[scope]
            self.note(op, method(STRANDED_ERROR), scope=scope)
        elif op == "create":
            sid = rng.choice(LATE)
            self.note(op, db.create_session(sid, "contention"), sid=sid)
        elif op == "append":
            sid = rng.choice(HOT)
            content = f"{self.db.actor} message {len(self.log)} ünï"
            self.note(op, db.append_message(sid, "user", content), sid=sid, content=content)
        else:
            sid = rng.choice(HOT)
            pending = [row["id"] for row in db.list_pending_handoffs()]
            self.note(op, pending, state=db.get_handoff_state(sid), probe=db.has_pending_handoffs())

    def forget(self, sid: str) -> None:
        if sid in self.held:
            self.held.remove(sid)


def work(url: str, worker: int, seed: int, operations: int, start: Any, out: str) -> None:
    """Runs in a spawned child: open a store, wait for the others, run, write the log."""
    errors: list[str] = []
    log: list[dict[str, Any]] = []
    try:
        with SessionDB(url=url, **identity(worker)) as store:
            store.has_pending_handoffs()  # connected and schema-checked before the race
            start.wait(WAIT)
            runner = Worker(store, seed)
            log = runner.log
            for _ in range(operations):
                try:
                    runner.step()
                except Exception:
                    errors.append(traceback.format_exc())
    except BaseException:
        errors.append(traceback.format_exc())
    Path(out).write_text(json.dumps({"log": log, "errors": errors}))


# -- the test ---------------------------------------------------------------------------------


def run_contention(tmp_path: Path, operations: int, seed: int) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        for number, sid in enumerate(HOT):
            db.create_session(sid, "cli", started_at=float(number))
    url = f"sqlite:///{path}"
    context = FORKSERVER
    start = context.Barrier(PROCESSES + 1)
    outputs = [tmp_path / f"worker-{n}.json" for n in range(PROCESSES)]
    processes = [
        context.Process(
            target=work, args=(url, n, seed * 100 + n, operations, start, str(outputs[n]))
        )
        for n in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    try:
        start.wait(WAIT)
        for process in processes:
            process.join(WAIT)
            assert process.exitcode == 0, f"worker exit code {process.exitcode} (seed {seed})"
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()

    results = [json.loads(output.read_text()) for output in outputs]
    problems = [error for result in results for error in result["errors"]]
    assert not problems, f"seed {seed}: {len(problems)} error(s), first:\n{problems[0]}"
    logs = {identity(n)["actor"]: results[n]["log"] for n in range(PROCESSES)}
    assert all(len(log) == operations for log in logs.values())
    check_against_tables(path, logs, seed)


def logged_transitions(log: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Session -> the states this worker's successful operations moved it to, in order."""
    moved: dict[str, list[str]] = defaultdict(list)
    target = {"request": "pending", "retry": "pending", "claim": "running"}
    target.update(complete="completed", fail="failed")
    for entry in log:
        if entry["op"] in target and entry["result"] is True:
            moved[entry["sid"]].append(target[entry["op"]])
        elif entry["op"] == "reclaim":
            for sid in entry["result"]:
                moved[sid].append("failed")
    return dict(moved)


def reclaim_scopes(logs: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], list[str]]:
    """(actor, session) -> the scope of each reclaim by that actor that took that session, in
    the actor's order (which is the order of its events for that session)."""
    scopes: dict[tuple[str, str], list[str]] = defaultdict(list)
    for actor, log in logs.items():
        for entry in log:
            if entry["op"] == "reclaim":
                for sid in entry["result"]:
                    scopes[actor, sid].append(entry["scope"])
    return scopes


def replay(
    events: list[dict[str, Any]],
    identities: dict[str, dict[str, Any]],
    scopes: dict[tuple[str, str], list[str]],
) -> dict[str, Any]:
    """Run the audit trail, in id (commit) order, through the state machine's rules, owners
    and fencing included: a gateway with an owner finishes only a running row it claimed, a
    reclaim takes only what its scope allows (no lease here ever expires: they last an hour)."""
    rows: dict[str, dict[str, Any]] = {
        sid: {"state": None, "platform": None, "error": None, "attempt": 0, "owner": None}
        for sid in HOT
    }
    leased: dict[str, bool] = dict.fromkeys(HOT, False)
    scopes = {key: list(found) for key, found in scopes.items()}
    for event in events:
        sid = event["session_id"]
        row = rows[sid]
        before, after, detail = row["state"], event["to_state"], event["detail"]
        actor = identities[event["actor"]]
        assert event["from_state"] == before, f"event {event} does not follow {row}"
        if after == "pending":
            if detail.startswith("retry for "):
                assert before == "failed", event
                platform = detail.removeprefix("retry for ")
            else:
                assert before in (None, "completed", "failed"), event
                platform = detail.removeprefix("requested for ")
            row.update(state=after, platform=platform, error=None, owner=None)
            leased[sid] = False
        elif after == "running":
            assert before == "pending", event
            assert event["attempt"] == row["attempt"] + 1, event
            row.update(state=after, attempt=row["attempt"] + 1, owner=actor["owner"])
            leased[sid] = actor["lease_seconds"] is not None
        else:
            assert after in ("completed", "failed"), event
            assert before in ("pending", "running"), event
            assert event["attempt"] == row["attempt"], event
            if before == "running":
                reclaim = after == "failed" and detail == STRANDED_ERROR
                if reclaim:
                    scope = scopes[event["actor"], sid].pop(0)
                    assert scope != "expired", f"no lease expires here: {event}"
                    if scope == "stale":
                        assert not leased[sid] or row["owner"] == actor["owner"], (event, row)
                elif actor["owner"] is not None:
                    assert row["owner"] == actor["owner"], f"fencing let {event} finish {row}"
            else:
                assert after == "failed", event
            row.update(state=after, error=None if after == "completed" else detail)
    assert not any(scopes.values()), f"reclaims without their events: {scopes}"
    return rows


def check_against_tables(path: Path, logs: dict[str, list[dict[str, Any]]], seed: int) -> None:
    engine = create_engine(sync_url(f"sqlite:///{path}"), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            events = [
                dict(row._mapping)
                for row in connection.execute(text("SELECT * FROM handoff_events ORDER BY id"))
            ]
            sessions = {
                row.id: {
                    "state": row.handoff_state,
                    "platform": row.handoff_platform,
                    "error": row.handoff_error,
                    "attempt": row.handoff_attempt,
                    "owner": row.handoff_owner,
                }
                for row in connection.execute(text("SELECT * FROM sessions"))
            }
            messages = {
                (row.id, row.session_id, row.role, row.content)
                for row in connection.execute(text("SELECT * FROM messages"))
            }
    finally:
        engine.dispose()

    # Every event is one logged success of the worker it names, in that worker's order.
    per_actor: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for event in events:
        per_actor[event["actor"]][event["session_id"]].append(event["to_state"])
    assert set(per_actor) <= set(logs), f"events by unknown actors: {set(per_actor) - set(logs)}"
    for actor, log in logs.items():
        assert {sid: moves for sid, moves in per_actor[actor].items()} == logged_transitions(log), (
            f"{actor}'s logged successes differ from its audit events (seed {seed})"
        )
    successes = sum(
        len(moves) for log in logs.values() for moves in logged_transitions(log).values()
    )
    assert len(events) == successes
    # The mix really exercised the machine: every kind of move happened.
    assert {event["to_state"] for event in events} == {"pending", "running", "completed", "failed"}

    # The history is valid in commit order, and the table holds where it ends.
    identities = {identity(n)["actor"]: identity(n) for n in range(PROCESSES)}
    replayed = replay(events, identities, reclaim_scopes(logs))
    created = {entry["sid"] for log in logs.values() for entry in log if entry["op"] == "create"}
    assert set(sessions) == set(HOT) | created
    assert {sid: sessions[sid] for sid in HOT} == replayed, f"seed {seed}"
    for sid in created:
        assert sessions[sid]["state"] is None

    # Appends: exactly the logged ones, each with the id its caller got back.
    appended = {
        (entry["result"], entry["sid"], "user", entry["content"])
        for log in logs.values()
        for entry in log
        if entry["op"] == "append"
    }
    assert messages == appended


def a_seed() -> int:
    chosen = os.environ.get("HERMES_STATE_CONTENTION_SEED")
    return int(chosen) if chosen else random.randrange(1_000_000)


def test_eight_processes_contend_without_errors_or_lost_updates(tmp_path: Path) -> None:
    run_contention(tmp_path, operations=150, seed=a_seed())


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_eight_processes_contend_for_longer(tmp_path: Path, round_: int) -> None:
    run_contention(tmp_path, operations=10_000, seed=a_seed() + round_)
