"""Never computing a vector twice: reuse the vectors a tenant's rows already carry.

A vector is a function of the text and the embedding identity, so a text already embedded by the
same identity (``continue``, ``thanks``, a pasted log, the same prompt sent again) need not be
embedded again. The cache *is* the lake: the ``done`` rows of ``content_rows``, looked up by the
SHA-256 of their text, one tenant at a time. Keeping it there, rather than in a table of its own,
means erasure and retention remove a text's vector together with its rows (a separate cache
would keep vectors of erased texts), and keys and hits never leave the tenant's partitions: a
lookup for tenant A reads only A's files and is answered only from them.

A :class:`VectorReuse` remembers every vector its job computes, and loads a tenant's stored
(hash → vector) map once the job has asked about ``load_after`` of the tenant's texts, so one job
reads each tenant at most once. Not at the first text: that read is of every embedded row of the
tenant, 1.7–3.4 s for a 50,000-row tenant of 384-d vectors on the 2-core bench machine, while a
one-turn ingest or a warm live writer embeds two or three texts in tens of milliseconds. Below
the threshold a job reuses only within itself. It holds about 1.6 kB per distinct text of each
loaded tenant, and at most ``remember_at_most`` remembered vectors of a tenant it has not loaded
(a long-lived writer would otherwise keep every vector it ever computed). A long text's passage
vectors (lake.embedding.passages) are reused with its vector.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import NamedTuple

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds

from lake.embedding.passages import column_passages
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table


def text_digest(text: str) -> bytes:
    """The key of a text: SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class Embedded(NamedTuple):
    """A text's vector, and its passages' vectors when it is longer than the model reads."""

    vector: np.ndarray
    passages: np.ndarray | None = None


class VectorReuse:
    """Vectors of ``identity`` already in the lake, per tenant, as of ``version`` of
    ``content_rows`` (None = the latest, read when the tenant is loaded)."""

    def __init__(self, store: LakeStore, identity: str, *, version: int | None = None,
                 load_after: int = Settings.embed_reuse_min_texts,
                 remember_at_most: int = 100_000) -> None:
        self._store = store
        self._identity = identity
        self._version = version
        self._load_after = load_after
        self._remember_at_most = remember_at_most
        self._tenants: dict[str, dict[bytes, Embedded]] = {}
        self._loaded: set[str] = set()
        self._asked: dict[str, int] = {}

    @property
    def identity(self) -> str:
        """The embedding identity whose vectors are reused (no other identity's ever are)."""
        return self._identity

    def loaded(self, tenant: str) -> bool:
        """Whether the tenant's stored vectors have been read (see the module notes)."""
        return tenant in self._loaded

    def lookup(self, tenant: str, digests: Collection[bytes]) -> dict[bytes, Embedded]:
        """The known vectors among ``digests`` for rows of ``tenant`` (missing ones left out):
        those the job computed, and the tenant's stored ones once the job has asked about
        enough of its texts."""
        self._asked[tenant] = self._asked.get(tenant, 0) + len(digests)
        known = self._tenants.setdefault(tenant, {})
        if tenant not in self._loaded and self._asked[tenant] >= self._load_after:
            self._loaded.add(tenant)
            known.update(self._load(tenant))
        return {d: known[d] for d in digests if d in known}

    def remember(self, tenant: str, digest: bytes, vector: np.ndarray,
                 passages: np.ndarray | None = None) -> None:
        """Record a vector (and passage vectors) the job just computed for a text of
        ``tenant``."""
        known = self._tenants.setdefault(tenant, {})
        known[digest] = Embedded(vector, passages)
        if tenant not in self._loaded and len(known) > self._remember_at_most:
            del known[next(iter(known))]  # the oldest: dicts keep insertion order

    def remembered(self) -> dict[str, dict[bytes, Embedded]]:
        """The vectors held per tenant: those computed or given (:meth:`remember`), and the
        stored ones of loaded tenants."""
        return {tenant: dict(known) for tenant, known in self._tenants.items()}

    def _load(self, tenant: str) -> dict[bytes, Embedded]:
        if not self._store.exists(Table.CONTENT_ROWS):
            return {}
        rows = self._store.read(
            Table.CONTENT_ROWS, version=self._version,
            columns=["text", "embedding", "passage_embeddings"],
            filter=(ds.field("tenant") == tenant) & (ds.field("embedding_status") == "done")
            & (ds.field("embedding_model") == self._identity))
        rows = rows.filter(pc.is_valid(rows.column("embedding")))
        if rows.num_rows == 0:
            return {}
        embedding = rows.column("embedding").combine_chunks()
        flat = embedding.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
        sizes = pc.list_value_length(embedding).to_numpy(zero_copy_only=False)
        if not (sizes == sizes[0]).all() or sizes[0] == 0:
            return {}  # a partly written or mixed-width column: not worth trusting for reuse
        dim = int(sizes[0])
        vectors = flat.reshape(len(sizes), dim)
        at, found = column_passages(rows.column("passage_embeddings"), dim)
        counts = np.bincount(at, minlength=rows.num_rows).tolist()  # ``at`` is ascending
        ends = np.cumsum(counts).tolist()
        passages = [found[end - count:end] if count else None
                    for count, end in zip(counts, ends, strict=True)]
        return {text_digest(text): Embedded(vectors[i], passages[i])
                for i, text in enumerate(rows.column("text").to_pylist()) if text is not None}
