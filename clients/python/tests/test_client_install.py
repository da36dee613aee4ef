"""The client is a distribution of its own: installed alone into a fresh environment, it
brings httpx and Rich, none of the server's dependencies, and works against a server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Tenant

pytestmark = pytest.mark.http

CLIENT = Path(__file__).resolve().parent.parent
# the uv that scripts/bootstrap.sh put in the checkout (scripts/test runs it first)
UV = CLIENT.parent.parent / ".tools" / "bin" / "uv"
SERVER_ONLY = ["fastapi", "sqlalchemy", "headwater", "jsonschema_rs", "boto3", "psycopg"]


def uv(*args: str) -> None:
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NATIVE_TLS": "1"}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run([str(UV), *args], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment holding only the client and what it needs."""
    venv = tmp_path_factory.mktemp("client-alone") / "venv"
    uv("venv", "--quiet", "--python", sys.executable, str(venv))
    uv("pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(CLIENT))
    return venv


def test_it_installs_without_the_servers_dependencies(alone: Path) -> None:
    probe = (
        "import importlib.util, json, headwater_client;"
        f"print(json.dumps({{m: importlib.util.find_spec(m) is not None for m in {SERVER_ONLY}}}))"
    )
    done = subprocess.run(
        [str(alone / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == dict.fromkeys(SERVER_ONLY, False)
    helped = subprocess.run(
        [str(alone / "bin" / "headwater-client"), "--help"], capture_output=True, text=True
    )
    assert helped.returncode == 0 and "push" in helped.stdout and "upload" in helped.stdout


def test_the_installed_command_talks_to_a_server(alone: Path, tenant: Tenant) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    env |= tenant.env(HEADWATER_PROFILES_FILE="/nonexistent")
    done = subprocess.run(
        [str(alone / "bin" / "headwater-client"), "whoami", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=alone,  # away from the source tree
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["company_id"] == tenant.company_id
