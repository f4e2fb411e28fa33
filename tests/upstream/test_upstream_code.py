"""Upstream's own store opens and writes the files hermes-state adopts or creates.

Opt-in: upstream's code is not part of this project. Set HERMES_STATE_UPSTREAM_RUNNER to a
command that runs a Python script with upstream hermes-agent's ``hermes_state`` importable
(a checkout's modules on PYTHONPATH, its dependencies installed), e.g. a small shell script
ending in ``exec python "$@"``. The script given to it here is this project's own.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import subprocess
import textwrap
from pathlib import Path

import pytest

from hermes_state import SessionDB, drift
from hermes_state.engine import resolve_url
from tests.support.vintages import REAL_SCHEMA11, REAL_SCHEMA30

RUNNER = os.environ.get("HERMES_STATE_UPSTREAM_RUNNER")
pytestmark = pytest.mark.skipif(
    not RUNNER, reason="HERMES_STATE_UPSTREAM_RUNNER is not set (upstream's code is needed)"
)

# Run under upstream's store: read what is there, write a session with a transcript, search.
SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from hermes_state import SessionDB

    db = SessionDB(db_path=Path(sys.argv[1]))
    ours = db.get_session("written-here")
    seen = int(ours is not None and ours["title"] == "Written by hermes-state")
    db.create_session("written-upstream", "cli", model="m", system_prompt="be brief")
    db.set_session_title("written-upstream", "Written by upstream")
    db.append_message("written-upstream", "user", "the zanzibar ledger, please")
    db.append_message("written-upstream", "assistant", [{"type": "text", "text": "here"}])
    found = db.search_messages("zanzibar")
    db.end_session("written-upstream", "user_exit")
    db.close()
    print(seen, len(found))
    """
)


def _run_upstream(tmp_path: Path, path: Path) -> list[int]:
    script = tmp_path / "as_upstream.py"
    script.write_text(SCRIPT)
    assert RUNNER is not None
    done = subprocess.run(
        [*shlex.split(RUNNER), str(script), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [int(word) for word in done.stdout.split()[-2:]]


@pytest.mark.parametrize("source", [REAL_SCHEMA11, REAL_SCHEMA30, None], ids=["11", "30", "new"])
def test_upstream_opens_and_writes_what_hermes_state_made(
    tmp_path: Path, source: Path | None
) -> None:
    path = tmp_path / "state.db"
    if source is not None:
        shutil.copyfile(source, path)
    with SessionDB(path) as db:
        db.create_session("written-here", "cli", title="Written by hermes-state")
        db.append_message("written-here", "user", "hello")

    seen, found = _run_upstream(tmp_path, path)
    assert seen == 1  # upstream reads the session hermes-state wrote
    assert found == 1  # and finds, through its own full-text index, the message it wrote

    # And back: hermes-state reads what upstream wrote, and the file still matches the models.
    with SessionDB(path) as db:
        assert db.get_session("written-upstream")["title"] == "Written by upstream"
        assert db.get_session("written-upstream")["system_prompt"] == "be brief"
        assert db.get_messages("written-upstream")[-1]["content"] == [
            {"type": "text", "text": "here"}
        ]
    assert drift.check(resolve_url(path)) == []
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
