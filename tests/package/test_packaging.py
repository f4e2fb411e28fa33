"""A non-editable install carries everything needed to migrate a database from any directory.

The test suite runs against an editable install, where the Alembic scripts are simply read
from the checkout; a user's ``pip install .`` gets only what the wheel holds. So: build the
wheel from a copy of the working tree, look inside it, install it (with its declared
dependencies) into a fresh virtual environment, and migrate a database from a folder that
has nothing to do with the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from hermes_state import schema
from tests.support.mutants import (
    IGNORE as COPY_IGNORE,  # one list of what a copy of the project leaves out
)

# One worker builds the wheel and installs it (module fixtures) for every test here.
# Building and installing the wheel takes half a minute: in the full matrix (CI runs it).
pytestmark = [pytest.mark.xdist_group("packaging"), pytest.mark.full]

REPO_ROOT = Path(__file__).resolve().parents[2]
WHEELHOUSE_ENV = "HERMES_STATE_TEST_WHEELHOUSE"


def run(*argv: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300):
    return subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def clean_env(home: Path) -> dict[str, str]:
    """No PYTHONPATH, no hermes-state settings, no virtualenv of ours leaking in."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "HERMES_", "VIRTUAL_ENV", "PYTEST"))
    }
    env["HERMES_HOME"] = str(home)
    return env


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    workdir: Path
    env: dict[str, str]

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def console_script(self) -> Path:
        return self.venv / "bin" / "hermes-state"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source") / "hermes-state"
    shutil.copytree(REPO_ROOT, source, ignore=COPY_IGNORE)
    out = tmp_path_factory.mktemp("dist")
    built = run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", out, source, cwd=out
    )
    assert built.returncode == 0, built.stdout + built.stderr
    wheels = list(out.glob("hermes_state-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("installed")
    venv = base / "venv"
    created = run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=base)
    assert created.returncode == 0, created.stderr
    python = venv / "bin" / "python"
    workdir = base / "somewhere-else"
    workdir.mkdir()
    env = clean_env(base / "home")

    # The project venv's pip installs into the new interpreter, with the declared dependencies:
    # a dependency that cannot be installed fails the test. Offline, point
    # HERMES_STATE_TEST_WHEELHOUSE at a folder of wheels (`pip wheel -w DIR '.[test]'` made
    # while online) and only that folder is used.
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "--no-input"]
    wheelhouse = os.environ.get(WHEELHOUSE_ENV, "").strip()
    if wheelhouse:
        pip += ["--no-index", "--find-links", wheelhouse]
    done = run(*pip, wheel, cwd=workdir, env=env)
    assert done.returncode == 0, (
        f"installing {wheel.name} with its declared dependencies failed "
        f"(offline? set {WHEELHOUSE_ENV}):\n{done.stdout}{done.stderr}"
    )
    return Installed(wheel, venv, workdir, env)


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_wheel_carries_the_alembic_scripts(wheel: Path) -> None:
    names = wheel_names(wheel)
    expected = {
        "hermes_state/py.typed",
        "hermes_state/migrations/env.py",
        "hermes_state/migrations/script.py.mako",
    }
    assert expected <= names, sorted(expected - names)
    versions = sorted(REPO_ROOT.joinpath("migrations", "versions").glob("[!_]*.py"))
    assert versions
    for script in versions:
        assert f"hermes_state/migrations/versions/{script.name}" in names
    # The scripts ship inside the package, not as a stray top-level "migrations" package.
    assert not any(name.startswith("migrations/") for name in names)


def test_wheel_carries_every_module_of_the_checkout(wheel: Path) -> None:
    names = wheel_names(wheel)
    for package in ("hermes_state", "gateway"):
        for module in sorted(REPO_ROOT.joinpath(package).rglob("*.py")):
            if "__pycache__" in module.parts:
                continue
            relative = module.relative_to(REPO_ROOT).as_posix()
            assert relative in names, f"{relative} is not in the wheel"


def test_wheel_carries_the_dashboard_templates_and_static_files(wheel: Path) -> None:
    names = wheel_names(wheel)
    folder = REPO_ROOT / "hermes_state" / "dashboard"
    shipped = sorted([*folder.glob("templates/*.html"), *folder.glob("static/*")])
    assert shipped
    for path in shipped:
        relative = path.relative_to(REPO_ROOT).as_posix()
        assert relative in names, f"{relative} is not in the wheel"


def test_installed_copy_is_not_the_checkout(installed: Installed) -> None:
    shown = run(
        installed.python,
        "-c",
        "import hermes_state, hermes_state.schema as s; print(hermes_state.__file__); "
        "print(s.script_location())",
        cwd=installed.workdir,
        env=installed.env,
    )
    assert shown.returncode == 0, shown.stderr
    module_file, scripts = shown.stdout.split()
    assert Path(module_file).is_relative_to(installed.venv)
    assert Path(scripts).is_relative_to(installed.venv)
    assert not Path(scripts).is_relative_to(REPO_ROOT)
    assert Path(scripts, "env.py").is_file()


def test_installed_copy_migrates_through_the_library(installed: Installed) -> None:
    target = installed.workdir / "library" / "x.db"
    migrated = run(
        installed.python,
        "-c",
        "import sys\n"
        "from hermes_state import SessionDB, drift, schema\n"
        "from hermes_state.engine import resolve_url\n"
        "url = resolve_url(sys.argv[1])\n"
        "schema.upgrade(url)\n"
        "print(schema.revision_of(url))\n"
        "assert drift.check(url) == [], drift.check(url)\n"
        "with SessionDB(sys.argv[1]) as db:\n"
        "    db.create_session('s', 'cli')\n"
        "    assert db.request_handoff('s', 'telegram')\n",
        target,
        cwd=installed.workdir,
        env=installed.env,
    )
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.split() == [schema.HEAD_REVISION]


def test_installed_console_script_migrates_from_any_directory(installed: Installed) -> None:
    assert installed.console_script.exists()
    target = installed.workdir / "x.db"

    upgraded = run(
        installed.console_script,
        "--url",
        target,
        "db",
        "upgrade",
        cwd=installed.workdir,
        env=installed.env,
    )
    assert upgraded.returncode == 0, upgraded.stderr
    current = run(
        installed.console_script,
        "--url",
        target,
        "db",
        "current",
        cwd=installed.workdir,
        env=installed.env,
    )
    assert current.returncode == 0, current.stderr
    assert current.stdout.strip() == f"{schema.HEAD_REVISION} (head)"
    checked = run(
        installed.console_script,
        "--url",
        target,
        "db",
        "check",
        cwd=installed.workdir,
        env=installed.env,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
