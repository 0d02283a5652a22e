"""The docs site builds with `mkdocs build --strict`, as `make docs` runs it: a link to a page,
anchor or file that is not there, or a page left out of the nav, fails the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
         "--site-dir", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    built = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr[-4000:]
    assert (tmp_path / "site" / "cli" / "index.html").is_file()
    assert (tmp_path / "site" / "results" / "locomo_recall.png").is_file()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The same configuration over a page with one broken link does not build."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# home\n\nSee [the missing page](missing.md).\n")
    config.update(docs_dir=str(docs), nav=[{"Home": "index.md"}],
                  hooks=[str(ROOT / "docs_hooks.py")])
    probe = tmp_path / "mkdocs.yml"
    probe.write_text(yaml.safe_dump(config))
    built = _build(probe, tmp_path / "site")
    assert built.returncode != 0
    assert "missing.md" in built.stderr


def test_the_readme_is_short_and_its_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if "://" not in t]
    assert "docs/cli.md" in local
    assert [t for t in local if not (ROOT / t).exists()] == []
