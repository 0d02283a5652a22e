from __future__ import annotations

from pathlib import Path

import pytest

from lake.errors import LakeError
from lake.settings import RetentionRule, Settings, save_policy


def test_policy_saved_under_the_lake_is_loaded_by_from_env(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    settings = Settings(lake=lake, default_ttl_days=90, retention=(
        RetentionRule("acme", 30), RetentionRule("acme", 7, app="support", role="note")))
    save_policy(settings)
    loaded = Settings.from_env(lake)
    assert loaded.default_ttl_days == 90
    assert loaded.ttl_days_for("acme", "other") == 30
    assert loaded.ttl_days_for("acme", "support", "note") == 7
    assert loaded.ttl_days_for("globex", "x") == 90


def test_a_broken_policy_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "policy.json").write_text("{not json")
    with pytest.raises(LakeError, match=r"policy\.json is unreadable"):
        Settings.from_env(tmp_path)
