"""A full disk under a recording server: requests get a 503 that names the cause, no
acknowledged turn is lost, the spool and the tables stay readable, and recording resumes by
itself once space is freed. The lake lives on a small tmpfs the test mounts (root only)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.pipeline.service.server import Server, make_keys, wait_until
from tests.reliability.lake_audit import TurnKey, audit_lake, key_of, turn_record

DISK_MB = 48
MOST_REQUESTS = 400  # the disk fills long before; bounds the loop


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs",
                              str(disk)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path, leave_bytes: int) -> Path:
    """A ballast file taking all but ``leave_bytes`` of the disk's free space."""
    ballast = disk / "ballast"
    stat = os.statvfs(disk)
    free = stat.f_bavail * stat.f_frsize
    with ballast.open("wb") as out:
        out.truncate(0)
        chunk = b"\0" * (1 << 20)
        left = max(free - leave_bytes, 0)
        while left > 0:
            out.write(chunk[:min(left, len(chunk))])
            left -= len(chunk)
    return ballast


def test_a_full_disk_refuses_clearly_loses_nothing_and_recovers(small_disk: Path) -> None:
    lake = small_disk / "lake"
    keys = make_keys(lake)
    acked: set[TurnKey] = set()
    with Server(lake) as server, server.client(keys["recorder"]) as client, \
            server.client(keys["analyst"]) as analyst:
        for n in range(5):
            record = turn_record(n)
            assert client.post("/v1/turns", json=record).status_code == 200
            acked.add(key_of(record))
        ballast = _fill(small_disk, leave_bytes=256 * 1024)
        refused: httpx.Response | None = None
        for n in range(5, 5 + MOST_REQUESTS):
            record = turn_record(n)
            record["completion"]["text"] += " filler" * 4000
            answer = client.post("/v1/turns", json=record)
            if answer.status_code == 200:
                acked.add(key_of(record))
                continue
            refused = answer
            break
        assert refused is not None, "the disk never filled"
        assert refused.status_code == 503, refused.text
        assert "No space left on device" in refused.json()["error"]["message"], refused.text
        # Alive, and reads still answer while the disk is full.
        assert httpx.get(f"{server.url}/healthz").status_code == 200
        assert analyst.post("/v1/search", json={"query": "mk1", "scope": "tenant"}
                            ).status_code == 200
        ballast.unlink()
        # Recording resumes by itself, and every acknowledged turn becomes searchable.
        after = turn_record(9_999)
        assert wait_until(lambda: client.post("/v1/turns", json=after).status_code == 200,
                          timeout_s=120, every_s=1.0), server.log_tail()
        acked.add(key_of(after))
        assert wait_until(lambda: all(
            k[2] in [h["turn_id"] for h in analyst.post("/v1/search", json={
                "query": f"mk{int(k[2].removeprefix('t-'))}", "scope": "tenant"}
            ).json()["hits"]] for k in sorted(acked)[-3:]), timeout_s=120), server.log_tail()
    audit = audit_lake(lake)
    assert not audit.problems, audit.problems[:10]
    missing = acked - audit.keys
    assert not missing, sorted(missing)[:10]
    assert all(audit.turns[k] == 1 for k in acked)
    assert not list((lake / "_spool").rglob("g*.json"))
