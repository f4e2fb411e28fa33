"""Upstream's own ``import_sessions`` reads what ``hermes-state session export`` writes, and
keeps it all; importing it twice changes nothing the second time.

Opt-in, as ``test_upstream_code.py``: set HERMES_STATE_UPSTREAM_RUNNER to a command that runs
a Python script with upstream hermes-agent's ``hermes_state`` importable. The script given to
it is this project's own.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_state import SessionDB
from tests.backends.test_portability import conversation
from tests.conftest import CliResult

RUNNER = os.environ.get("HERMES_STATE_UPSTREAM_RUNNER")
pytestmark = pytest.mark.skipif(
    not RUNNER, reason="HERMES_STATE_UPSTREAM_RUNNER is not set (upstream's code is needed)"
)

# Under upstream's store: import the file twice, then export every session back as JSON.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from hermes_state import SessionDB

    rows = [json.loads(line) for line in open(sys.argv[2], encoding="utf-8") if line.strip()]
    db = SessionDB(db_path=Path(sys.argv[1]))
    first = db.import_sessions(rows)
    second = db.import_sessions(rows)
    back = {row["id"]: db.export_session(row["id"]) for row in rows}
    lineage = db.get_compression_lineage("tip")
    db.close()
    print(json.dumps({"first": first, "second": second, "back": back, "lineage": lineage}))
    """
)


def test_upstreams_import_keeps_what_hermes_state_exported(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    source = tmp_path / "ours.db"
    with SessionDB(source) as db:
        conversation(db)
    exported = tmp_path / "ours.jsonl"
    assert cli("session", "export", "--url", str(source), "-o", str(exported)).code == 0
    script = tmp_path / "as_upstream.py"
    script.write_text(SCRIPT)
    assert RUNNER is not None
    done = subprocess.run(
        [*shlex.split(RUNNER), str(script), str(tmp_path / "upstream.db"), str(exported)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["first"]["ok"] is True
    assert report["first"]["imported"] == 4
    assert report["second"]["skipped"] == 4
    assert report["second"]["imported"] == 0
    assert report["lineage"] == ["root", "tip"]
    ours = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    for row in ours:
        theirs = report["back"][row["id"]]
        shared = (set(theirs) & set(row)) - {"messages"}
        assert {k: theirs[k] for k in shared} == {k: row[k] for k in shared}
        assert len(theirs["messages"]) == len(row["messages"])
        for got, given in zip(theirs["messages"], row["messages"], strict=True):
            same = set(got) & set(given) - {"id", "session_id"}
            assert {k: got[k] for k in same} == {k: given[k] for k in same}
