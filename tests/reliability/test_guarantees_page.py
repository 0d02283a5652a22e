"""The guarantees page (docs/guarantees.md) names only tests that exist, and every reliability
test file is named there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def _section() -> str:
    return (ROOT / "docs" / "guarantees.md").read_text()


def test_every_test_the_guarantees_name_exists() -> None:
    section = _section()
    defined = {name for path in (ROOT / "tests").rglob("test_*.py")
               for name in re.findall(r"^def (test_\w+)", path.read_text(), re.M)}
    named = set(re.findall(r"::(test_\w+)", section))
    assert named and named <= defined, sorted(named - defined)
    files = {p.name for p in HERE.glob("test_*.py")} - {Path(__file__).name}
    assert {f for f in files if f not in section} == set()
