"""The tests' server processes forked from one that has imported Headwater
(`tests/preloaded.py`) behave as the same command in a new interpreter: the same exit
codes and output, each in its own environment."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import preloaded
from tests.http_server import free_port, process_env, wait_healthy

CLI = [sys.executable, "-m", "headwater.cli"]
WAYS = ("forked", "new interpreter")


def _start(way: str, argv: list[str], env: dict[str, str], log: Path) -> preloaded.Process:
    with log.open("wb") as out:
        if way == "forked":
            process = preloaded.launch(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
            assert isinstance(process, preloaded.Forked)
            return process
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


@pytest.mark.http
def test_a_refused_command_ends_with_the_same_code_and_words(tmp_path: Path) -> None:
    env = process_env({"HEADWATER_DATA_DIR": str(tmp_path)})
    ends = []
    for way in WAYS:
        log = tmp_path / f"{way}.log"
        process = _start(way, [*CLI, "serve", "--port", "not-a-port"], env, log)
        ends.append((process.wait(timeout=60), log.read_text()))
    assert ends[0] == ends[1]
    assert ends[0][0] == 2 and "Invalid value for '--port'" in ends[0][1]


@pytest.mark.http
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_signalled_server_ends_as_in_a_new_interpreter(tmp_path: Path, sig: int) -> None:
    """Each way in a data directory of its own: the forked one reads its environment, not
    the fork server's (its database is made where its HEADWATER_DATA_DIR says)."""
    ends = []
    for way in WAYS:
        data = tmp_path / way.replace(" ", "-")
        port = free_port()
        log = tmp_path / f"{data.name}.log"
        process = _start(
            way,
            [*CLI, "serve", "--port", str(port)],
            process_env({"HEADWATER_DATA_DIR": str(data)}),
            log,
        )
        wait_healthy(f"http://127.0.0.1:{port}", process, log)
        assert (data / "headwater.db").exists()
        process.send_signal(sig)
        code = process.wait(timeout=30)
        ends.append((code, "Application shutdown complete" in log.read_text()))
    assert ends[0] == ends[1]
    assert ends[0] == (-sig, sig == signal.SIGTERM)


@pytest.mark.parametrize(
    ("args", "env", "forked"),
    [
        (["worker"], {}, True),
        (["sftp", "--port", "0"], {}, True),
        (["serve", "--port", "1"], {"HEADWATER_SFTP_PORT": "0", "HEADWATER_SMTP_PORT": "0"}, True),
        (["serve", "--no-sftp", "--no-smtp"], {}, True),
        # SFTP beside the API: metrics for several processes before the API is imported
        (["serve", "--no-smtp"], {}, False),
        (["serve"], {"HEADWATER_SFTP_PORT": "0", "HEADWATER_SMTP_PORT": "2525"}, False),
        # several API processes, spawned anew by uvicorn's supervisor
        (["serve", "--no-sftp", "--no-smtp", "--workers", "2"], {}, False),
        (["worker"], {"PROMETHEUS_MULTIPROC_DIR": "metrics"}, False),
        (["demo"], {}, False),
    ],
)
def test_only_commands_that_import_nothing_else_are_forked(
    tmp_path: Path, args: list[str], env: dict[str, str], forked: bool
) -> None:
    with (tmp_path / "log").open("wb") as out:
        popen = {"env": env, "stdout": out, "stderr": subprocess.STDOUT}
        assert (preloaded.forkable([*CLI, *args], popen) is not None) is forked
        # output to a pipe is a new interpreter's too
        popen["stdout"] = subprocess.PIPE
        assert preloaded.forkable([*CLI, *args], popen) is None


SCRIPTS = {
    "exits": "import sys; print(sys.argv[1:]); sys.exit(3)",
    "reads its environment": "import os; print(os.environ['ONLY_HERE'])",
    "raises": "import headwater.worker; raise ValueError('no good')",
    "dies": "import os, signal; print('dying', flush=True); os.kill(os.getpid(), signal.SIGKILL)",
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_forked_script_ends_as_python_c_does(name: str) -> None:
    env = {"ONLY_HERE": "yes", "PATH": "/usr/bin:/bin"}
    forked = preloaded.run_script(SCRIPTS[name], "a", "b", env=env)
    new = subprocess.run(
        [sys.executable, "-c", SCRIPTS[name], "a", "b"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (forked.returncode, forked.stdout) == (new.returncode, new.stdout)
    assert forked.stderr.splitlines()[-1:] == new.stderr.splitlines()[-1:]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["companies", "create", "Forked Co"], 0),  # prints what it made
        (["companies", "create"], 2),  # a usage error, on standard error
        (["datasets", "show", "no-such-client", "orders"], 1),  # refused
    ],
)
def test_an_operator_command_forked_ends_as_in_a_new_interpreter(
    tmp_path: Path, args: list[str], code: int
) -> None:
    """`tests.factories.run_cli` forks operator commands: the same exit code and the
    same words on each stream (ids and times aside) as a new interpreter's."""
    ends = []
    for way in WAYS:
        env = {"HEADWATER_DATA_DIR": str(tmp_path / way), "PATH": "/usr/bin:/bin"}
        if way == "forked":
            done = preloaded.run_command(*args, env=env)
        else:
            done = subprocess.run(
                [*CLI, *args], env=env, capture_output=True, text=True, timeout=120, check=False
            )
        ends.append((done.returncode, _words(done.stdout), _words(done.stderr)))
    assert ends[0] == ends[1]
    assert ends[0][0] == code
    assert ends[0][1] or ends[0][2]  # it said something


def _words(text: str) -> list[str]:
    """The output's words, each holding a digit (ids, times) replaced by one mark."""
    return re.sub(r"\S*\d\S*", "#", text).split()
