"""Postgres 18 + pgvector + pg_trgm: the platform's one-table design, and KDCube's reference SQL.

Table ``rows`` (tenant, user, conversation, turn, role, text, anchors, ts, embedding
vector(384)) with a generated tsvector (anchors weighted A over text B), a GIN tsvector index, a
GIN trigram index, an HNSW cosine index and a btree on (tenant, user, conversation, ts).

Arms of the platform design: ``semantic`` (cosine distance), ``lexical`` (``ts_rank_cd`` over
``websearch_to_tsquery`` with its ANDs turned into ORs, so any word can match, as BM25 does),
``trigram`` (``word_similarity`` through the indexable ``<%`` operator at turnlake's 0.5
threshold); ``hybrid`` fuses them exactly as turnlake does (bench.compare.systems).
KDCube's reference behaviour: ``kd-lexical`` ANDs every word (``plainto_tsquery``),
``kd-trigram`` ranks by the ``word_similarity()`` function, which no index serves, and
``kd-hybrid`` is plain RRF (k=60) of ``semantic`` + those two over rows.
"""

from __future__ import annotations

import struct
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from bench.compare.rows import DIM, Query, TurnKey
from bench.compare.systems import (
    RowHit,
    SearchSettings,
    fuse_like_turnlake,
    plain_rrf,
    top_turns,
)

SCHEMA = f"""
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
DROP TABLE IF EXISTS rows;
CREATE TABLE rows (
    rid bigint PRIMARY KEY,
    tenant text NOT NULL,
    user_id text NOT NULL,
    conversation_id text NOT NULL,
    turn_id text NOT NULL,
    role text NOT NULL,
    text text NOT NULL,
    anchors text,
    ts timestamptz NOT NULL,
    embedding vector({DIM}) NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', coalesce(anchors, '')), 'A') ||
        setweight(to_tsvector('english', CASE WHEN anchors IS NULL THEN text ELSE '' END), 'B')
    ) STORED
)"""
COPY = ("COPY rows (rid, tenant, user_id, conversation_id, turn_id, role, text, anchors, ts, "
        "embedding) FROM STDIN (FORMAT binary)")
INDEXES = {
    "btree": "CREATE INDEX rows_scope ON rows (tenant, user_id, conversation_id, ts)",
    "tsvector_gin": "CREATE INDEX rows_tsv ON rows USING gin (tsv)",
    "trigram_gin": "CREATE INDEX rows_trgm ON rows USING gin (text gin_trgm_ops)",
    "hnsw": "CREATE INDEX rows_hnsw ON rows USING hnsw (embedding vector_cosine_ops)",
}
SESSION = [
    "SET pg_trgm.word_similarity_threshold = 0.5",
    # pgvector 0.8: keep scanning the graph until the user filter has let enough rows through
    "SET hnsw.iterative_scan = relaxed_order",
    "SET hnsw.ef_search = 100",
    # prepared statements must still plan per user, as an unprepared query would
    "SET plan_cache_mode = force_custom_plan",
]
_SCOPE = "tenant = %(tenant)s AND user_id = %(user)s"
_COLS = "rid, conversation_id, turn_id, extract(epoch FROM ts)"
SQL = {
    # the CTE materializes the top rows so relaxed ordering is re-sorted exactly
    "semantic": f"""SELECT * FROM (SELECT {_COLS}, 1 - (embedding <=> %(vec)s::vector) AS s
        FROM rows WHERE {_SCOPE} ORDER BY embedding <=> %(vec)s::vector LIMIT %(n)s) t
        ORDER BY s DESC""",
    "lexical": f"""SELECT {_COLS}, ts_rank_cd(tsv, q) AS s
        FROM rows, (SELECT replace(websearch_to_tsquery('english', %(q)s)::text, ' & ', ' | '
                               )::tsquery AS q) w
        WHERE {_SCOPE} AND tsv @@ q ORDER BY s DESC, rid LIMIT %(n)s""",
    "trigram": f"""SELECT {_COLS}, word_similarity(%(q)s, text) AS s
        FROM rows WHERE {_SCOPE} AND %(q)s <%% text ORDER BY s DESC, rid LIMIT %(n)s""",
    "kd-lexical": f"""SELECT {_COLS}, ts_rank_cd(tsv, q) AS s
        FROM rows, plainto_tsquery('english', %(q)s) q
        WHERE {_SCOPE} AND tsv @@ q ORDER BY s DESC, rid LIMIT %(n)s""",
    "kd-trigram": f"""SELECT {_COLS}, word_similarity(%(q)s, text) AS s
        FROM rows WHERE {_SCOPE} AND word_similarity(%(q)s, text) > 0.3
        ORDER BY s DESC, rid LIMIT %(n)s""",
}
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def _copy_stream(rows: pa.Table) -> bytes:
    """The table in COPY BINARY format (text as UTF-8, ts as µs since 2000, pgvector's
    binary vector: int16 dim, int16 unused, big-endian float4s)."""
    out = [b"PGCOPY\n\xff\r\n\x00", struct.pack("!ii", 0, 0)]
    cols = {c: rows.column(c).to_pylist() for c in rows.column_names if c != "embedding"}
    vectors = rows.column("embedding").combine_chunks().flatten().to_numpy()
    vectors = vectors.reshape(rows.num_rows, DIM).astype(">f4")
    vec_head = struct.pack("!ihh", 4 + 4 * DIM, DIM, 0)
    epoch_us = int(_PG_EPOCH.timestamp()) * 1_000_000
    ts_us = rows.column("ts").cast(pa.int64()).to_pylist()

    def text(value: str | None) -> bytes:
        if value is None:
            return b"\xff\xff\xff\xff"
        raw = value.encode()
        return struct.pack("!i", len(raw)) + raw

    for i in range(rows.num_rows):
        out.append(struct.pack("!hiq", 10, 8, cols["rid"][i]))
        out.extend(text(cols[c][i]) for c in ("tenant", "user_id", "conversation_id",
                                               "turn_id", "role", "text", "anchors"))
        out.append(struct.pack("!iq", 8, ts_us[i] - epoch_us))
        out.append(vec_head + vectors[i].tobytes())
    out.append(struct.pack("!h", -1))
    return b"".join(out)


def build(conninfo: str, rows: pa.Table) -> dict[str, Any]:
    """Create, load (COPY BINARY) and index the table; returns seconds per step and bytes."""
    import psycopg

    out: dict[str, Any] = {}
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(SCHEMA)
        t0 = time.perf_counter()
        payload = _copy_stream(rows)
        with conn.cursor() as cur, cur.copy(COPY) as copy:
            for start in range(0, len(payload), 1 << 20):
                copy.write(payload[start:start + (1 << 20)])
        out["load_s"] = time.perf_counter() - t0
        for name, sql in INDEXES.items():
            t = time.perf_counter()
            conn.execute(sql)
            out[f"{name}_s"] = time.perf_counter() - t
        t = time.perf_counter()
        conn.execute("VACUUM ANALYZE rows")
        out["vacuum_analyze_s"] = time.perf_counter() - t
        out["total_s"] = time.perf_counter() - t0
        sizes = conn.execute(
            "SELECT pg_table_size('rows'), pg_indexes_size('rows'), pg_total_relation_size("
            "'rows'), pg_database_size(current_database())").fetchone()
        assert sizes is not None
        out["table_bytes"], out["index_bytes"], out["bytes"], out["database_bytes"] = sizes
        out["index_bytes_each"] = dict(conn.execute(
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) "
            "FROM pg_index WHERE indrelid = 'rows'::regclass").fetchall())
    return out


class PgSystem:
    """One client connection; every arm is one SQL statement, hybrids fuse in Python."""

    name = "postgres"
    arms: tuple[str, ...] = ("hybrid", "semantic", "lexical", "trigram",
            "kd-hybrid", "kd-lexical", "kd-trigram")

    def __init__(self, conninfo: str, settings: SearchSettings) -> None:
        import psycopg

        self.settings = settings
        self.conn = psycopg.connect(conninfo, autocommit=True)
        for sql in SESSION:
            self.conn.execute(sql)
        # prepare on first use so timings exclude planning of the statement text
        self.conn.prepare_threshold = 0

    def backend_pid(self) -> int:
        """The server process answering this connection."""
        row = self.conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        return int(row[0])

    def params(self, query: Query, vector: np.ndarray) -> dict[str, Any]:
        """Statement parameters of one query (the vector in pgvector's text form)."""
        return {"tenant": query.tenant, "user": query.user_id, "q": query.text,
                "vec": "[" + ",".join(f"{x:.7g}" for x in vector.tolist()) + "]",
                "n": self.settings.depth}

    def rows(self, arm: str, params: dict[str, Any]) -> list[RowHit]:
        """One single-statement arm, best first."""
        if arm not in SQL:
            raise ValueError(f"postgres has no single arm {arm!r}; arms are {', '.join(SQL)}")
        cur = self.conn.execute(SQL[arm], params)
        return [RowHit(int(r), (c, t), float(ts), float(s)) for r, c, t, ts, s in cur]

    def explain(self, arm: str, query: Query, vector: np.ndarray) -> str:
        """The plan the server picks for an arm (first lines), to say which index it used."""
        sql = "EXPLAIN (COSTS OFF) " + SQL[arm]
        plan = self.conn.execute(sql, self.params(query, vector))
        return " | ".join(str(r[0]).strip() for r in plan.fetchall()[:8])

    def search(self, arm: str, query: Query, vector: np.ndarray) -> list[TurnKey]:
        """An arm's best k turns; hybrids run their three arms then fuse."""
        k = self.settings.k
        params = self.params(query, vector)
        if arm == "hybrid":
            lists = {g: self.rows(g, params) for g in ("semantic", "lexical", "trigram")}
            return fuse_like_turnlake(lists, self.settings)
        if arm == "kd-hybrid":
            lists = {g: self.rows(g, params) for g in ("semantic", "kd-lexical", "kd-trigram")}
            return plain_rrf(lists, k)
        return top_turns(self.rows(arm, params), k)

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()
