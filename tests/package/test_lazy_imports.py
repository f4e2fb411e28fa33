"""Opening is cheap: what a fresh interpreter loads for `import hermes_state` and for a store.

Each check runs in a new interpreter, since this one has long imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hermes_state import SessionDB, schema
from hermes_state.engine import resolve_url

PROBE = """
import json, sys
{statement}
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in {watched!r})))
"""
WATCHED = ["alembic", "sqlalchemy", "hermes_state", "gateway", "asyncio"]


def loaded_after(statement: str) -> set[str]:
    """The watched top-level packages (and submodules) a fresh interpreter holds afterwards."""
    code = PROBE.format(statement=statement, watched=WATCHED)
    finished = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(finished.stdout))


def test_importing_the_package_loads_no_sqlalchemy_alembic_cli_or_asyncio() -> None:
    loaded = loaded_after("import hermes_state")
    assert "hermes_state" in loaded
    assert not {name for name in loaded if name.split(".")[0] in ("sqlalchemy", "alembic")}
    assert "hermes_state.cli" not in loaded
    assert "asyncio" not in loaded


def test_opening_an_up_to_date_file_does_not_load_alembic(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SessionDB(path).close()  # created and migrated here, so it is at head
    loaded = loaded_after(
        f"from hermes_state import SessionDB\n"
        f"db = SessionDB({str(path)!r})\n"
        f"assert db.get_handoff_state('nobody') is None\n"
        f"db.close()"
    )
    assert "hermes_state.store" in loaded
    assert not {name for name in loaded if name.split(".")[0] == "alembic"}


def test_opening_a_file_behind_head_does_load_alembic(tmp_path: Path) -> None:
    """The other side of the check above: an upgrade needs the scripts, so they load."""
    path = tmp_path / "state.db"
    SessionDB(path).close()
    schema.downgrade(resolve_url(path), "0002_handoff_leases")
    loaded = loaded_after(f"from hermes_state import SessionDB\nSessionDB({str(path)!r}).close()")
    assert "alembic" in loaded
    assert schema.revision_of(resolve_url(path)) == schema.HEAD_REVISION


def test_a_store_and_a_command_work_without_the_orm(tmp_path: Path) -> None:
    """The stores and the command line use the tables: ``sqlalchemy.orm`` (a quarter of a
    command's start-up) loads only for the ORM classes, which still come from ``models``."""
    path = tmp_path / "state.db"
    SessionDB(path).close()
    loaded = loaded_after(
        f"import contextlib, io\n"
        f"from hermes_state import SessionDB\n"
        f"from hermes_state.cli import main\n"
        f"with SessionDB({str(path)!r}) as db:\n"
        f"    db.create_session('s1', 'cli')\n"
        f"with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    assert main(['--url', {str(path)!r}, 'session', 'list', '--json']) == 0\n"
        f"assert 's1' in out.getvalue()"
    )
    assert {"hermes_state.store", "hermes_state.cli", "hermes_state.models.tables"} <= loaded
    assert "sqlalchemy.orm" not in loaded
    assert "hermes_state.models.orm" not in loaded

    loaded = loaded_after(
        "from hermes_state.models import Session\nassert Session.__table__.name == 'sessions'"
    )
    assert {"sqlalchemy.orm", "hermes_state.models.orm"} <= loaded


def test_the_orm_session_class_has_a_name_that_does_not_clash() -> None:
    from sqlalchemy.orm import Session as OrmSession

    from hermes_state.models import AgentSession, Session

    assert AgentSession is Session  # the first name is kept
    assert AgentSession.__table__.name == "sessions"
    assert AgentSession is not OrmSession
