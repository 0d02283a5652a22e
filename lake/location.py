"""Where a lake lives: a local folder or an object-store prefix (``s3://bucket/prefix``).

Everything a lake keeps outside its Delta tables (hosted file bytes, index artifacts, index
pointers, batch and retention manifests, the retention policy, locks) is a *blob* addressed by a
key relative to the lake root, read and written through :class:`Blobs`. A local lake maps keys
onto files (atomic rename, fsync); an S3 lake maps them onto objects (a PUT is atomic, and
conditional PUTs give the locks their exclusivity).

S3 settings come from the standard AWS environment variables (``AWS_ENDPOINT_URL[_S3]``,
``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``), overridden by explicit :class:`S3Config` values from settings.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from lake.errors import LakeError

S3_SCHEME = "s3://"
CACHE_ENV = "TURNLAKE_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "turnlake"


@dataclass(frozen=True)
class S3Config:
    """Connection settings of an S3-compatible store; None fields fall back to AWS_* env."""

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None

    def resolved(self) -> S3Config:
        """This config with every unset field taken from the standard AWS environment."""
        env = os.environ
        return S3Config(
            endpoint=self.endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get(
                "AWS_ENDPOINT_URL"),
            region=self.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
            or "us-east-1",
            access_key_id=self.access_key_id or env.get("AWS_ACCESS_KEY_ID"),
            secret_access_key=self.secret_access_key or env.get("AWS_SECRET_ACCESS_KEY"),
            session_token=self.session_token or env.get("AWS_SESSION_TOKEN"),
        )


@dataclass(frozen=True)
class LakeLocation:
    """A lake root: ``local`` folder, or ``bucket`` + ``prefix`` on an S3-compatible store.

    Picklable (clients are created lazily per process), so batch tasks on other machines can
    reopen the same lake from it.
    """

    uri: str
    s3: S3Config | None = None
    cache_root: Path = field(default_factory=lambda: Path(os.environ.get(CACHE_ENV)
                                                          or DEFAULT_CACHE))

    @classmethod
    def of(cls, root: str | Path | LakeLocation, s3: S3Config | None = None) -> LakeLocation:
        """Parse a lake root given as a path, an ``s3://bucket/prefix`` URI, or a location."""
        if isinstance(root, LakeLocation):
            return root
        text = str(root)
        if text.startswith(S3_SCHEME):
            bucket, _, prefix = text[len(S3_SCHEME):].partition("/")
            if not bucket:
                raise LakeError(f"lake root {text!r} names no bucket (expected "
                                "s3://bucket/prefix)")
            prefix = prefix.strip("/")
            uri = f"{S3_SCHEME}{bucket}/{prefix}" if prefix else f"{S3_SCHEME}{bucket}"
            return cls(uri=uri, s3=(s3 or S3Config()).resolved())
        if "://" in text:
            raise LakeError(f"lake root {text!r}: only local folders and s3:// URIs are "
                            "supported")
        return cls(uri=str(Path(text).expanduser().absolute()))

    def __str__(self) -> str:
        return self.uri

    @property
    def remote(self) -> bool:
        """True for an object-store lake."""
        return self.uri.startswith(S3_SCHEME)

    @property
    def local(self) -> Path:
        """The folder of a local lake (an error for an object-store lake)."""
        if self.remote:
            raise LakeError(f"the lake at {self.uri} is not on the local file system")
        return Path(self.uri)

    @property
    def bucket(self) -> str:
        """The bucket of an object-store lake."""
        return self.uri[len(S3_SCHEME):].partition("/")[0]

    @property
    def prefix(self) -> str:
        """The key prefix of an object-store lake ("" at the bucket root)."""
        return self.uri[len(S3_SCHEME):].partition("/")[2]

    def child_uri(self, *parts: str) -> str:
        """The URI (or local path) of something under the lake root."""
        return "/".join([self.uri.rstrip("/"), *parts])

    def delta_options(self) -> dict[str, str] | None:
        """Storage options for deltalake (None for a local lake).

        delta-rs 1.x commits to S3 with conditional writes (``If-None-Match``), so concurrent
        Delta commits never overwrite each other without a DynamoDB lock table.
        """
        if self.s3 is None:
            return None
        options = {"AWS_REGION": self.s3.region or "us-east-1"}
        if self.s3.endpoint:
            options["AWS_ENDPOINT_URL"] = self.s3.endpoint
            if self.s3.endpoint.startswith("http://"):
                options["AWS_ALLOW_HTTP"] = "true"
        if self.s3.access_key_id and self.s3.secret_access_key:
            options["AWS_ACCESS_KEY_ID"] = self.s3.access_key_id
            options["AWS_SECRET_ACCESS_KEY"] = self.s3.secret_access_key
            if self.s3.session_token:
                options["AWS_SESSION_TOKEN"] = self.s3.session_token
        return options

    @property
    def cache_dir(self) -> Path:
        """This lake's local cache folder (index artifacts of an object-store lake)."""
        digest = hashlib.sha256(f"{self.uri}|{self.s3.endpoint if self.s3 else ''}"
                                .encode()).hexdigest()[:16]
        return self.cache_root / digest

    @cached_property
    def blobs(self) -> Blobs:
        """The lake's blob store."""
        if self.remote:
            return S3Blobs(self)
        return LocalBlobs(self.local)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("blobs", None)  # a client holds sockets: each process makes its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class Blobs(Protocol):
    """Keyed bytes under a lake root; keys use ``/`` and never start with one."""

    def read_bytes(self, key: str) -> bytes:
        """The bytes under a key; FileNotFoundError when there are none."""

    def write_bytes(self, key: str, data: bytes, *, durable: bool = True) -> None:
        """Store bytes under a key, atomically (readers see the old or the new bytes)."""

    def exists(self, key: str) -> bool:
        """Whether a blob exists under the key."""

    def delete(self, key: str) -> bool:
        """Remove one blob; True when something was removed."""

    def keys(self, prefix: str) -> list[str]:
        """Every key under a folder-like prefix (recursive), sorted."""

    def children(self, prefix: str) -> list[str]:
        """The names directly under a folder-like prefix (files and folders), sorted."""

    def delete_prefix(self, prefix: str) -> int:
        """Remove every blob under a folder-like prefix; returns how many went."""

    def stamp(self, key: str) -> str | None:
        """A token that changes whenever the blob is rewritten (None when absent)."""

    def upload_dir(self, local: Path, prefix: str) -> None:
        """Copy a local folder's files under a prefix."""

    def download_dir(self, prefix: str, local: Path) -> None:
        """Copy every blob under a prefix into a local folder."""


def atomic_write(target: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to a temp file beside ``target`` and rename it over the target, so
    readers see the old bytes or the new ones; fsync'd first when ``durable``. The folder
    must exist."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def remove_file(path: Path) -> bool:
    """Unlink a file (a symlink itself, never its target); True when there was one."""
    if path.is_file() or path.is_symlink():
        path.unlink()
        return True
    return False


def _check_key(key: str) -> str:
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in key.split("/")):
        raise LakeError(f"malformed lake key {key!r}")
    return key


class LocalBlobs:
    """Blobs as files under a local folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._base = str(root)

    def path(self, key: str) -> Path:
        """The file behind a key."""
        return self.root / _check_key(key)

    def _file(self, key: str) -> str:
        # a plain string path: a search lists and stats index pointers before every query,
        # where building Path objects would cost more than the system calls
        return os.path.join(self._base, _check_key(key))

    def read_bytes(self, key: str) -> bytes:
        """The bytes under a key; FileNotFoundError when there are none."""
        return self.path(key).read_bytes()

    def write_bytes(self, key: str, data: bytes, *, durable: bool = True) -> None:
        """Write to a temp file then rename over the target (fsync'd when ``durable``)."""
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, data, durable=durable)

    def exists(self, key: str) -> bool:
        """Whether a file exists under the key."""
        return self.path(key).is_file()

    def delete(self, key: str) -> bool:
        """Remove one file; True when something was removed."""
        return remove_file(self.path(key))

    def keys(self, prefix: str) -> list[str]:
        """Every file under a folder (recursive) as keys, sorted."""
        base = self.path(prefix)
        if not base.is_dir():
            return []
        return sorted(str(p.relative_to(self.root)) for p in base.rglob("*")
                      if p.is_file() and not p.name.endswith(".tmp"))

    def children(self, prefix: str) -> list[str]:
        """The names directly inside a folder, sorted."""
        try:
            names = os.listdir(self._file(prefix))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(name for name in names if not name.endswith(".tmp"))

    def delete_prefix(self, prefix: str) -> int:
        """Remove a folder and everything in it; returns files removed."""
        import shutil

        base = self.path(prefix)
        if not base.exists():
            return 0
        count = sum(1 for p in base.rglob("*") if p.is_file() or p.is_symlink())
        shutil.rmtree(base, ignore_errors=True)
        return count

    def stamp(self, key: str) -> str | None:
        """The file's modification time in nanoseconds (None when absent)."""
        try:
            return str(os.stat(self._file(key)).st_mtime_ns)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def upload_dir(self, local: Path, prefix: str) -> None:
        """Copy a folder's files under a prefix (a no-op when they are the same folder)."""
        import shutil

        target = self.path(prefix)
        if local.resolve() == target.resolve():
            return
        shutil.copytree(local, target, dirs_exist_ok=True)

    def download_dir(self, prefix: str, local: Path) -> None:
        """Copy a folder's files into another folder."""
        import shutil

        shutil.copytree(self.path(prefix), local, dirs_exist_ok=True)


class S3Blobs:
    """Blobs as objects under ``s3://bucket/prefix`` (boto3, from the ``s3`` extra)."""

    def __init__(self, location: LakeLocation) -> None:
        self._location = location
        self.bucket = location.bucket
        self._prefix = f"{location.prefix}/" if location.prefix else ""

    @cached_property
    def client(self) -> Any:  # boto3 clients are untyped
        """A boto3 S3 client for this store."""
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise LakeError("s3:// lakes need boto3: pip install 'turnlake[s3]'") from exc
        cfg = self._location.s3 or S3Config().resolved()
        return boto3.client(
            "s3", endpoint_url=cfg.endpoint, region_name=cfg.region,
            aws_access_key_id=cfg.access_key_id, aws_secret_access_key=cfg.secret_access_key,
            aws_session_token=cfg.session_token,
            config=Config(retries={"max_attempts": 5, "mode": "standard"},
                          max_pool_connections=16))

    def _key(self, key: str) -> str:
        return self._prefix + _check_key(key)

    def _folder(self, prefix: str) -> str:
        return self._prefix + _check_key(prefix.rstrip("/")) + "/"

    def _error(self, exc: Exception, what: str, key: str) -> LakeError:
        return LakeError(f"{what} s3://{self.bucket}/{self._prefix}{key} failed: {exc}")

    def read_bytes(self, key: str) -> bytes:
        """The object's bytes; FileNotFoundError when there is none."""
        try:
            body: bytes = self.client.get_object(Bucket=self.bucket,
                                                 Key=self._key(key))["Body"].read()
            return body
        except self.client.exceptions.NoSuchKey as exc:
            raise FileNotFoundError(f"s3://{self.bucket}/{self._key(key)}") from exc
        except Exception as exc:
            raise self._error(exc, "reading", key) from exc

    def read_tagged(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and ETag, or None when absent (for compare-and-swap)."""
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except self.client.exceptions.NoSuchKey:
            return None
        return response["Body"].read(), str(response["ETag"])

    def write_bytes(self, key: str, data: bytes, *, durable: bool = True) -> None:
        """PUT the object (S3 PUTs are atomic and durable once acknowledged)."""
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except Exception as exc:
            raise self._error(exc, "writing", key) from exc

    def put_if(self, key: str, data: bytes, *, etag: str | None) -> str | None:
        """Conditional PUT: create when ``etag`` is None, else replace only that version.

        Returns the new ETag, or None when the condition failed (someone else won).
        """
        extra = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
        try:
            response = self.client.put_object(Bucket=self.bucket, Key=self._key(key),
                                              Body=data, **extra)
        except self.client.exceptions.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"):
                return None
            raise self._error(exc, "conditionally writing", key) from exc
        return str(response["ETag"])

    def delete_if(self, key: str, etag: str) -> bool:
        """Delete the object only if it is still the version with ``etag``."""
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key), IfMatch=etag)
            return True
        except self.client.exceptions.ClientError:
            return False

    def exists(self, key: str) -> bool:
        """Whether an object exists under the key."""
        return self.stamp(key) is not None

    def delete(self, key: str) -> bool:
        """Remove one object; True when it existed."""
        existed = self.exists(key)
        if existed:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        return existed

    def _list(self, prefix: str, delimiter: str | None = None) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._folder(prefix)}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        try:
            yield from self.client.get_paginator("list_objects_v2").paginate(**kwargs)
        except Exception as exc:
            raise self._error(exc, "listing", prefix) from exc

    def keys(self, prefix: str) -> list[str]:
        """Every key under a prefix, relative to the lake root, sorted."""
        cut = len(self._prefix)
        return sorted(item["Key"][cut:] for page in self._list(prefix)
                      for item in page.get("Contents", []))

    def children(self, prefix: str) -> list[str]:
        """Names directly under a prefix (objects and common prefixes), sorted."""
        folder = self._folder(prefix)
        names: set[str] = set()
        for page in self._list(prefix, delimiter="/"):
            names.update(p["Prefix"][len(folder):].rstrip("/")
                         for p in page.get("CommonPrefixes", []))
            names.update(item["Key"][len(folder):] for item in page.get("Contents", []))
        return sorted(n for n in names if n)

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under a prefix (batches of 1,000 keys)."""
        keys = [self._prefix + k for k in self.keys(prefix)]
        for start in range(0, len(keys), 1000):
            chunk = keys[start:start + 1000]
            self.client.delete_objects(Bucket=self.bucket, Delete={
                "Objects": [{"Key": k} for k in chunk], "Quiet": True})
        return len(keys)

    def stamp(self, key: str) -> str | None:
        """The object's ETag (None when absent)."""
        try:
            return str(self.client.head_object(Bucket=self.bucket, Key=self._key(key))["ETag"])
        except self.client.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._error(exc, "inspecting", key) from exc

    def upload_dir(self, local: Path, prefix: str) -> None:
        """Upload a folder's files under a prefix (a few at once)."""
        from concurrent.futures import ThreadPoolExecutor

        files = [p for p in local.rglob("*") if p.is_file()]

        def put(path: Path) -> None:
            self.write_bytes(f"{prefix.rstrip('/')}/{path.relative_to(local).as_posix()}",
                             path.read_bytes())

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(put, files))

    def download_dir(self, prefix: str, local: Path) -> None:
        """Download every object under a prefix into a folder (a few at once)."""
        from concurrent.futures import ThreadPoolExecutor

        base = prefix.rstrip("/") + "/"

        def get(key: str) -> None:
            target = local / key[len(base):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.read_bytes(key))

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(get, self.keys(prefix)))
