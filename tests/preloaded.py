"""Headwater's server processes, forked from a process that has already imported them.

Importing the API, a channel's server or the worker costs a new interpreter 0.8-1.5 s
of CPU, and the server step starts hundreds of them: that was some 40% of its CPU. So
each pytest process keeps a fork server (multiprocessing's "forkserver") that imports
them once; a server process is forked from it and runs `python -m headwater.cli ARGS`
as that command would (`runpy`, with its own environment, working directory and log).
It is a real process on real sockets, signalled, killed and reaped as one, and `Forked`
answers for it as `subprocess.Popen` would. Scripts that import Headwater to race each
other or to die at a step (`python -c CODE`) are forked the same way (`run_script`,
`start_script`), and so are the operator commands the tests run to their end
(`run_command`): what they print and how they end is what those tests check, and their
start-up time is `bench/cli_startup.py`'s.

A server command runs this way only when a new interpreter would import nothing
differently: `serve` with one API process and neither SFTP nor SMTP beside it (several API processes
are spawned anew by uvicorn's supervisor; SFTP or SMTP beside the API set up metrics for
several processes before the API is imported), `worker`, `sftp` and `smtp`, with their
output going to a file. `launch` gives every other command to `subprocess.Popen`."""

from __future__ import annotations

import multiprocessing
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# what the commands import while they start (`python -X importtime` of `serve`)
_PRELOAD = [
    "typer",
    "headwater.main",
    "headwater.worker",
    "headwater.sftp.server",
    "headwater.inbox.server",
    "headwater.ops.logs",
    "headwater.migrations",
    "alembic.command",
    "uvicorn",
    "aiohttp",
]
_COMMANDS = {"serve", "worker", "sftp", "smtp"}
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(_PRELOAD)


def is_server(argv: Sequence[str]) -> bool:
    """Whether `argv` is `python -m headwater.cli` of a long-running process."""
    return list(argv[1:3]) == ["-m", "headwater.cli"] and len(argv) >= 4 and argv[3] in _COMMANDS


class Forked:
    """A forked server process, with the part of `subprocess.Popen` the tests use."""

    def __init__(self, args: Sequence[str], process: Any) -> None:
        self.args = list(args)
        self._process = process
        self.pid: int = process.pid

    @property
    def returncode(self) -> int | None:
        code: int | None = self._process.exitcode
        return code

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.returncode is None:
            assert timeout is not None
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


Process = subprocess.Popen[bytes] | Forked


def launch(argv: Sequence[str], **popen: Any) -> Process:
    """`subprocess.Popen(argv, **popen)`, forked from the fork server where it may be."""
    args = forkable(argv, popen)
    if args is None:
        return subprocess.Popen(argv, **popen)
    env = dict(popen.get("env") or os.environ)
    log = popen["stdout"].name
    process = _CONTEXT.Process(
        target=_run, args=(args, env, popen.get("cwd"), log, log), name=args[0], daemon=True
    )
    process.start()
    return Forked(argv, process)


def run_command(
    *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([python, "-m", "headwater.cli", *args], env=env,
    capture_output=True, text=True, timeout=timeout)`, forked: an operator command run to
    its end. A new interpreter spent about a second of CPU importing what the fork
    server has imported (57 of the in-process step's CPU-seconds)."""
    argv = [sys.executable, "-m", "headwater.cli", *args]
    return Script.start(argv, _run, list(args), env, None).finish(timeout)


def forkable(argv: Sequence[str], popen: dict[str, Any]) -> list[str] | None:
    """The command's arguments when it may be forked, else None."""
    if not is_server(argv):
        return None
    if set(popen) - {"env", "cwd", "stdout", "stderr"} or popen.get("stderr") != subprocess.STDOUT:
        return None
    if not isinstance(getattr(popen.get("stdout"), "name", None), str):
        return None  # output to a pipe, or inherited
    args = list(argv[3:])
    env = popen.get("env") or os.environ
    if "PROMETHEUS_MULTIPROC_DIR" in env:
        return None
    if args[0] == "serve":
        beside = [
            env.get(f"HEADWATER_{channel.upper()}_PORT") != "0" and f"--no-{channel}" not in args
            for channel in ("sftp", "smtp")
        ]
        if "--workers" in args or any(beside):
            return None
    return args


def run_script(
    code: str, *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([python, "-c", code, *args], env=env, capture_output=True,
    text=True, timeout=timeout)`, forked: for scripts that import Headwater and race or
    die."""
    return start_script(code, *args, env=env).finish(timeout)


def start_script(code: str, *args: str, env: dict[str, str]) -> Script:
    """`python -c CODE ARGS` forked, its output kept in files until `finish`."""
    return Script.start(["-c", code, *args], _run_script, code, list(args), env)


class Script(Forked):
    """A forked `python -c` or operator command, and the files its output goes to."""

    @classmethod
    def start(cls, argv: Sequence[str], target: Callable[..., None], *args: Any) -> Script:
        """`target(*args, OUT, ERR)` forked (`argv` is what it stands for), OUT and ERR
        the files its standard output and error go to until `finish`."""
        files = Path(tempfile.mkdtemp(prefix="script-"))
        out, err = str(files / "out"), str(files / "err")
        process = _CONTEXT.Process(
            target=target, args=(*args, out, err), name="script", daemon=True
        )
        process.start()
        return cls(argv, process, files)

    def __init__(self, args: Sequence[str], process: Any, files: Path) -> None:
        super().__init__(args, process)
        self.files = files

    def finish(self, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Wait for it (killed after `timeout`, as `subprocess.run` does) and read what it
        wrote."""
        try:
            code = self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()
            raise
        finally:  # a process that died before it opened them wrote nothing
            out, err = (_text(self.files / name) for name in ("out", "err"))
            shutil.rmtree(self.files, ignore_errors=True)
        return subprocess.CompletedProcess(self.args, code, out, err)


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def light_secret_hashing() -> Any:
    """Make this process hash client secrets at the tests' cost, and return the hasher it
    had. Argon2id as in production, with 1 MiB and one pass instead of 19 MiB and two; a
    hash carries its parameters, so every path runs as it does in production. At the real
    cost, argon2 took a third of the in-process step's CPU (220 of 631 s in py-spy) and
    50 of the server step's 420 (the servers' token requests and new credentials)."""
    from argon2 import PasswordHasher

    from headwater.identity import secrets

    real = secrets._hasher
    secrets._hasher = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    return real


def _become(env: dict[str, str], cwd: str | None, out: str, err: str) -> None:
    """In a forked process: take `env` as the whole environment, `cwd` as the working
    directory, send standard output and error to the files `out` and `err`, and hash
    secrets at the tests' cost."""
    light_secret_hashing()
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    for path, fd in ((out, 1), (err, 2)):
        opened = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.dup2(opened, fd)
        os.close(opened)
    from headwater.config import get_settings

    get_settings.cache_clear()  # read from this environment, not the fork server's


def _run(args: list[str], env: dict[str, str], cwd: str | None, out: str, err: str) -> None:
    """In the forked process: become `python -m headwater.cli ARGS`."""
    _become(env, cwd, out, err)
    sys.argv = ["headwater.cli", *args]
    runpy.run_module("headwater.cli", run_name="__main__", alter_sys=True)


def _run_script(code: str, args: list[str], env: dict[str, str], out: str, err: str) -> None:
    """In the forked process: become `python -c CODE ARGS`."""
    _become(env, None, out, err)
    sys.argv = ["-c", *args]
    exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102
