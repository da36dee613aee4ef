"""The README's set-up on a fresh machine: scripts/bootstrap.sh with a fresh HOME, no uv
on PATH, and a python3 that refuses `pip install` outside a virtual environment (PEP 668,
Debian's own interpreter). Nothing may be installed into that Python; .venv is built on
it; the demo's set-up holds no dev tools."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEBIAN_PYTHON = Path("/usr/bin/python3")
# What uv sync needs of the checkout (a clean clone holds the same files).
NEEDED = ["pyproject.toml", "uv.lock", "README.md", "scripts", "src", "clients"]


def _marker() -> Path | None:
    if not DEBIAN_PYTHON.exists():
        return None
    found = subprocess.run(
        [str(DEBIAN_PYTHON), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    marker = Path(found) / "EXTERNALLY-MANAGED"
    return marker if marker.exists() else None


def _bootstrap(
    checkout: Path, env: dict[str, str], *, timeout: float
) -> subprocess.CompletedProcess[str]:
    """`source scripts/bootstrap.sh` in the checkout, which must succeed."""
    done = subprocess.run(
        ["bash", "-c", "source scripts/bootstrap.sh && echo BOOTSTRAPPED"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0 and "BOOTSTRAPPED" in done.stdout, done.stderr[-4000:]
    return done


@pytest.mark.skipif(_marker() is None, reason="no PEP 668 python3 at /usr/bin/python3 here")
def test_bootstrap_works_on_a_pep_668_python_with_a_fresh_home(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in NEEDED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(
                source,
                checkout / name,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".venv", ".tools"),
            )
        else:
            shutil.copy2(source, checkout / name)
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "HOME": str(home),
        "PATH": "/usr/bin:/bin",  # Debian's python3, and no uv anywhere
        "PYTHON": "python3",
        "BOOTSTRAP_GROUPS": "serve",
        "PYTHONDONTWRITEBYTECODE": "1",  # as on this project's machines
        # downloads are shared with this machine's cache to keep CI quick; the cache holds
        # packages only, no configuration
        "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(Path.home() / ".cache" / "uv")),
    }
    assert shutil.which("uv", path=env["PATH"]) is None
    refused = subprocess.run(
        ["python3", "-m", "pip", "install", "--dry-run", "six"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr
    before = subprocess.run(
        ["python3", "-m", "pip", "list"], env=env, capture_output=True, text=True, check=True
    ).stdout

    _bootstrap(checkout, env, timeout=900)

    assert (checkout / ".tools" / "bin" / "uv").exists()
    config = (checkout / ".venv" / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in config, config
    assert "version_info = 3.11.2" in config or "version = 3.11.2" in config, config
    help_text = subprocess.run(
        [str(checkout / ".venv" / "bin" / "headwater"), "--help"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "serve" in help_text
    installed = {
        p.name.split("-")[0].lower()
        for p in (checkout / ".venv").glob("lib/*/site-packages/*.dist-info")
    }
    assert "fastapi" in installed and "uvicorn" in installed
    assert not {"pytest", "mypy", "moto", "schemathesis", "playwright"} & installed
    assert "headwater_client" in installed  # the README's examples use it
    # bytecode written at install, for the packages and this checkout's code alike: with
    # PYTHONDONTWRITEBYTECODE set, every process compiled them again at start
    site = next((checkout / ".venv").glob("lib/*/site-packages"))
    assert list(site.glob("fastapi/__pycache__/routing.*.pyc"))
    assert list((checkout / "src" / "headwater" / "__pycache__").glob("cli.*.pyc"))
    after = subprocess.run(
        ["python3", "-m", "pip", "list"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert after == before  # nothing was installed into Debian's Python
    assert not (home / ".local").exists()

    # a second start needs no network: no package index answers, and uv may not go out
    offline = env | {
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_FIND_LINKS": "",
        "UV_OFFLINE": "1",
        "UV_INDEX_URL": "http://127.0.0.1:9/simple",
    }
    again = _bootstrap(checkout, offline, timeout=300)
    assert "fetching uv" not in again.stderr
