"""The import contracts of pyproject.toml (``[tool.importlinter]``), as `make lint` checks
them: app over pipeline over lake, and no cycle between the modules of pipeline/. Run here
too, so that the suite (CI runs `make test`) holds the code to them; and shown to catch what
they forbid, function-level imports included, on a copy of the packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "pipeline", "lake", "turnlake")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the packages under ``root`` with the repository's contracts."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache", "--no-logo",
         str(ROOT / "pyproject.toml")],
        cwd=root, capture_output=True, text=True, timeout=300, check=False)


def test_the_code_keeps_its_import_contracts() -> None:
    checked = _lint_imports(ROOT)
    assert checked.returncode == 0, checked.stdout[-4000:] + checked.stderr[-2000:]
    assert "2 kept, 0 broken" in checked.stdout


def test_a_function_level_import_against_the_contracts_is_caught(tmp_path: Path) -> None:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    # The circle this round untied: an erase job reaching into the service for the spool.
    with (tmp_path / "pipeline" / "retention.py").open("a") as module:
        module.write("\n\ndef _settle() -> None:\n"
                     "    from pipeline.service.spool import settle_spools  # noqa: F401\n")
    with (tmp_path / "lake" / "members.py").open("a") as module:
        module.write("\n\ndef _job() -> None:\n"
                     "    from pipeline.jobs import run_ingest  # noqa: F401\n")
    checked = _lint_imports(tmp_path)
    assert checked.returncode == 1, checked.stdout[-4000:]
    assert "0 kept, 2 broken" in checked.stdout
    assert ".retention -> .service" in checked.stdout
    assert "lake.members -> pipeline.jobs" in checked.stdout
