"""Every benchmark script imports: a helper renamed in `tests/` once broke `bench.sftp`
and `bench.email` unseen, since nothing runs them in CI."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_benchmark_script_imports(name: str) -> None:
    """Each module imports; one run as a script (`python -m bench.<name>`) has its main."""
    module = importlib.import_module(f"bench.{name}")
    if '__name__ == "__main__"' in (BENCH / f"{name}.py").read_text():
        assert callable(getattr(module, "main", None)), f"bench.{name} has no main()"
