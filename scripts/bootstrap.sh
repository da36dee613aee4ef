# Sourced by scripts/demo and scripts/test: uv in a private tools folder of the checkout,
# then the locked environment in .venv, built on the python3 you run.
#
# Nothing is installed into any Python: pip only *downloads* uv's wheel (allowed on a
# PEP 668 "externally managed" interpreter such as Debian's), its hash is checked
# against scripts/uv-requirements.txt, and the uv binary is unpacked into .tools/bin.
# uv uses the system's certificate store (UV_NATIVE_TLS), as pip and curl do.
#
# BOOTSTRAP_GROUPS=serve (scripts/demo) installs only what serving needs; the default
# installs the dev group too (tests, type checks, benchmarks).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
UV_VERSION=0.13.8
PYTHON="${PYTHON:-python3}"
PYTHON_PATH="$("$PYTHON" -c 'import sys; print(sys.executable)')"
TOOLS=.tools
UV="$TOOLS/bin/uv"

# `uv --version` says "uv 0.13.8 (x86_64-unknown-linux-gnu)": its second word is the version
if [ ! -x "$UV" ] || [ "$("$UV" --version 2>/dev/null | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    echo "fetching uv $UV_VERSION into $TOOLS/ (once)" >&2
    rm -rf "$TOOLS/wheels"
    mkdir -p "$TOOLS/bin" "$TOOLS/wheels"
    if ! "$PYTHON_PATH" -m pip --version >/dev/null 2>&1; then
        # no pip on this interpreter: a private venv has one (python3-venv on Debian)
        "$PYTHON_PATH" -m venv "$TOOLS/venv"
        PIP_PYTHON="$TOOLS/venv/bin/python"
    else
        PIP_PYTHON="$PYTHON_PATH"
    fi
    "$PIP_PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: --require-hashes -r scripts/uv-requirements.txt -d "$TOOLS/wheels"
    "$PYTHON_PATH" - "$TOOLS" <<'PY'
import pathlib, stat, sys, zipfile
tools = pathlib.Path(sys.argv[1])
wheel = next((tools / "wheels").glob("uv-*.whl"))
with zipfile.ZipFile(wheel) as archive:
    name = next(n for n in archive.namelist() if n.endswith(".data/scripts/uv"))
    target = tools / "bin" / "uv"
    target.write_bytes(archive.read(name))
target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
PY
fi
export UV_NATIVE_TLS=1
export UV_PYTHON_DOWNLOADS=never
# Bytecode is written at install (--compile-bytecode, and compileall for this checkout's
# own code): where PYTHONDONTWRITEBYTECODE is set, as on this project's machines, Python
# never writes it, and every process compiled some 600 modules again at start (2.0-2.3 s
# of CPU for an operator command instead of 0.6). Both skip what is compiled already: a
# second start costs a fraction of a second.
if [ "${BOOTSTRAP_GROUPS:-dev}" = "serve" ]; then
    "$UV" sync --frozen --quiet --python "$PYTHON_PATH" --compile-bytecode \
        --no-dev --group demo --inexact
else
    "$UV" sync --frozen --quiet --python "$PYTHON_PATH" --compile-bytecode
fi
.venv/bin/python -m compileall -q -j 0 src clients/python/src >/dev/null
