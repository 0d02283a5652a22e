"""Lake locations and their blob stores, on a local folder and on a real S3-protocol server."""

from __future__ import annotations

import json
import pickle
import threading
import time
from pathlib import Path

import pytest

from lake.errors import ConcurrentWriteError, LakeError
from lake.location import Blobs, LakeLocation, S3Blobs
from lake.locks import writer_lock
from tests.s3_server import new_bucket, s3_config, s3_endpoint

__all__ = ["s3_endpoint"]  # the fixture, imported for pytest


def test_parse_local_and_s3_roots(tmp_path: Path) -> None:
    local = LakeLocation.of(tmp_path / "lake")
    assert not local.remote and local.local == tmp_path / "lake"
    remote = LakeLocation.of("s3://bucket-a/team/lake/")
    assert remote.remote and remote.bucket == "bucket-a" and remote.prefix == "team/lake"
    assert remote.child_uri("tables", "turn_logs") == "s3://bucket-a/team/lake/tables/turn_logs"
    assert LakeLocation.of("s3://bucket-a").prefix == ""
    assert LakeLocation.of(remote) is remote


@pytest.mark.parametrize("root, fragment", [("s3://", "names no bucket"),
                                            ("gs://bucket/x", "only local folders and s3://")])
def test_unsupported_roots_are_refused_by_name(root: str, fragment: str) -> None:
    with pytest.raises(LakeError, match=fragment) as err:
        LakeLocation.of(root)
    assert root in str(err.value)


def test_s3_settings_come_from_aws_env_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    env = LakeLocation.of("s3://bucket-a/x")
    assert env.delta_options() == {"AWS_REGION": "eu-west-3",
                                   "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
                                   "AWS_ALLOW_HTTP": "true"}
    given = LakeLocation.of("s3://bucket-a/x", s3_config("https://s3.example.com"))
    options = given.delta_options()
    assert options is not None and options["AWS_ENDPOINT_URL"] == "https://s3.example.com"
    assert "AWS_ALLOW_HTTP" not in options and options["AWS_ACCESS_KEY_ID"]


def test_a_location_pickles_without_its_client(s3_endpoint: str) -> None:
    location = LakeLocation.of(f"s3://{new_bucket(s3_endpoint)}/p", s3_config(s3_endpoint))
    location.blobs.write_bytes("a/b.txt", b"x")
    copy = pickle.loads(pickle.dumps(location))
    assert copy == location and copy.blobs.read_bytes("a/b.txt") == b"x"


def _exercise(blobs: Blobs) -> None:
    blobs.write_bytes("dir/one.json", b"1")
    blobs.write_bytes("dir/sub/two.json", b"22")
    blobs.write_bytes("other.txt", b"3")
    assert blobs.read_bytes("dir/sub/two.json") == b"22"
    assert blobs.keys("dir") == ["dir/one.json", "dir/sub/two.json"]
    assert blobs.children("dir") == ["one.json", "sub"]
    assert blobs.children("missing") == [] and blobs.keys("missing") == []
    first = blobs.stamp("dir/one.json")
    time.sleep(0.01)
    blobs.write_bytes("dir/one.json", b"one")
    assert first is not None and blobs.stamp("dir/one.json") not in (None, first)
    assert blobs.exists("other.txt") and blobs.delete("other.txt")
    assert not blobs.exists("other.txt") and not blobs.delete("other.txt")
    with pytest.raises(FileNotFoundError):
        blobs.read_bytes("other.txt")
    with pytest.raises(LakeError, match="malformed lake key"):
        blobs.read_bytes("../escape")
    assert blobs.delete_prefix("dir") == 2 and blobs.keys("dir") == []


def test_local_blobs(tmp_path: Path) -> None:
    _exercise(LakeLocation.of(tmp_path).blobs)


def test_s3_blobs(s3_endpoint: str, tmp_path: Path) -> None:
    location = LakeLocation.of(f"s3://{new_bucket(s3_endpoint)}/team/lake",
                               s3_config(s3_endpoint))
    _exercise(location.blobs)
    source = tmp_path / "src"
    (source / "x").mkdir(parents=True)
    (source / "x" / "a.bin").write_bytes(b"\0\1")
    (source / "b.txt").write_text("b")
    location.blobs.upload_dir(source, "up")
    location.blobs.download_dir("up", tmp_path / "dst")
    assert (tmp_path / "dst" / "x" / "a.bin").read_bytes() == b"\0\1"
    assert (tmp_path / "dst" / "b.txt").read_text() == "b"


def test_conditional_puts_let_one_writer_win(s3_endpoint: str) -> None:
    blobs = LakeLocation.of(f"s3://{new_bucket(s3_endpoint)}", s3_config(s3_endpoint)).blobs
    assert isinstance(blobs, S3Blobs)
    tag = blobs.put_if("k", b"a", etag=None)
    assert tag is not None and blobs.put_if("k", b"b", etag=None) is None
    newer = blobs.put_if("k", b"c", etag=tag)
    assert newer is not None and blobs.put_if("k", b"d", etag=tag) is None
    assert blobs.read_bytes("k") == b"c"


def test_s3_writer_lock_excludes_a_second_writer_and_names_the_holder(s3_endpoint: str) -> None:
    root = LakeLocation.of(f"s3://{new_bucket(s3_endpoint)}/lake", s3_config(s3_endpoint))
    entered = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with writer_lock(root, job="turnlake ingest"):
            entered.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert entered.wait(10)
    try:
        with pytest.raises(ConcurrentWriteError, match="being written by turnlake ingest"), \
                writer_lock(root, timeout_s=0.5, job="turnlake purge"):
            pass
    finally:
        release.set()
        holder.join()
    with writer_lock(root, timeout_s=5, job="turnlake purge"):  # released: free again
        assert root.blobs.exists("_locks/writer.lock")
    assert not root.blobs.exists("_locks/writer.lock")


def test_s3_lock_of_a_dead_holder_is_taken_over_after_its_lease(s3_endpoint: str) -> None:
    root = LakeLocation.of(f"s3://{new_bucket(s3_endpoint)}/lake", s3_config(s3_endpoint))
    stale = {"holder": "crashed job (pid 1 on gone)", "expires_at": time.time() - 1}
    root.blobs.write_bytes("_locks/writer.lock", json.dumps(stale).encode())
    with writer_lock(root, timeout_s=5, job="turnlake ingest"):
        lease = json.loads(root.blobs.read_bytes("_locks/writer.lock"))
        assert lease["holder"].startswith("turnlake ingest") and lease["expires_at"] > time.time()
    live = {"holder": "busy job (pid 2 on there)", "expires_at": time.time() + 60}
    root.blobs.write_bytes("_locks/writer.lock", json.dumps(live).encode())
    with pytest.raises(ConcurrentWriteError, match="busy job"), \
            writer_lock(root, timeout_s=0.5, job="turnlake ingest"):
        pass
