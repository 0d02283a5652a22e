"""Side-by-side benchmark of turnlake, LanceDB and Postgres (pgvector + tsvector + pg_trgm)."""
