# Sourced by scripts/demo and scripts/test: installs uv (pinned) and the locked environment.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
UV_VERSION=0.13.8
if ! python3 -m uv --version >/dev/null 2>&1; then
    echo "installing uv $UV_VERSION" >&2
    python3 -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi
export UV_PYTHON_DOWNLOADS=never
uv() { python3 -m uv "$@"; }
uv sync --frozen --quiet
