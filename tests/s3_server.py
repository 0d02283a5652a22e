"""A real S3-protocol server on loopback for object-store tests: moto in server mode, started
in its own process (so its request handling never competes with the test for the GIL)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lake.location import S3Config

REGION = "us-east-1"
KEY_ID = "turnlake-test"
SECRET = "turnlake-test-secret"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a moto S3 server running for the whole test session."""
    pytest.importorskip("moto")
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                 "-p", str(port)], stdout=out, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto server did not start: {log.read_text()}") from None
            time.sleep(0.1)
    try:
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def s3_config(endpoint: str) -> S3Config:
    """Connection settings for the test server."""
    return S3Config(endpoint=endpoint, region=REGION, access_key_id=KEY_ID,
                    secret_access_key=SECRET)


def new_bucket(endpoint: str) -> str:
    """Create a fresh bucket and return its name."""
    import boto3

    name = f"lake-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=KEY_ID,
                 aws_secret_access_key=SECRET).create_bucket(Bucket=name)
    return name


def bucket_objects(endpoint: str, bucket: str) -> dict[str, bytes]:
    """Every object in a bucket with its bytes."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                          aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            out[item["Key"]] = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
    return out


def aws_env(endpoint: str) -> dict[str, str]:
    """The standard AWS environment variables pointing at the test server."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": REGION, "AWS_ACCESS_KEY_ID": KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET}


def cache_files(cache: Path) -> list[Path]:
    """Files in a lake cache folder."""
    return sorted(p for p in cache.rglob("*") if p.is_file()) if cache.exists() else []


__all__ = ["aws_env", "bucket_objects", "cache_files", "new_bucket", "s3_config",
           "s3_endpoint"]
