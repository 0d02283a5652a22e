"""``turnlake keys create|list|revoke`` and ``turnlake serve``."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table as RichTable

from lake.errors import QueryError, TurnlakeError
from lake.keys import KEY_ROLES, KeyStore
from pipeline.commands.common import (
    LakeOption,
    app,
    console,
    existing_lake,
    fail,
    literal,
    out,
    settings_from,
)

keys_app = typer.Typer(no_args_is_help=True, help="API keys of `turnlake serve`.")
app.add_typer(keys_app, name="keys")


def _store(lake: str | None, *, create: bool = False) -> KeyStore:
    """The lake's key store; only ``keys create`` may start a lake that does not exist yet."""
    settings = settings_from(lake) if create else existing_lake(lake)
    return KeyStore(settings.lake, s3=settings.s3)


def _check_user_option(role: str, user: str | None) -> None:
    """Refuse ``--user`` where it would not narrow the key.

    Only a ``user`` key reads as its user; an analyst or admin key reads its whole tenant
    whatever user it names, so accepting ``--user`` there would suggest a limit that is not
    enforced. (The recorder's own message comes from the key store.)
    """
    if user is not None and role in ("analyst", "admin"):
        raise QueryError(f"--user only narrows a key of role user: an {role} key reads every "
                         f"user of its tenant; drop --user (or use --role user)")


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option("--tenant", help="The only tenant the key acts in.")],
    role: Annotated[str, typer.Option("--role", help=f"One of {', '.join(KEY_ROLES)}.")],
    user: Annotated[str | None, typer.Option(
        "--user", help="The user a user key reads as (required for role user).")] = None,
    name: Annotated[str | None, typer.Option(
        "--name", help="A name to list and revoke the key by (default ROLE-ID).")] = None,
    lake: LakeOption = None,
) -> None:
    """Create an API key; it is printed once, as the last word on stdout, and never stored."""
    try:
        _check_user_option(role, user)
        stored, key = _store(lake, create=True).create(tenant=tenant, role=role, user_id=user,
                                                       name=name)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    console.print(literal(f"created key {stored.name}: {stored.role} of tenant {stored.tenant}"
                          + (f", user {stored.user_id}" if stored.user_id else "")
                          + " (shown once; the lake keeps only a salted hash)"))
    typer.echo(key)


@keys_app.command("list")
def keys_list(lake: LakeOption = None) -> None:
    """List the keys: name, tenant, role, user, created, revoked (never the secrets)."""
    try:
        keys = _store(lake).list()
    except TurnlakeError as exc:
        raise fail(exc) from exc
    table = RichTable("name", "tenant", "role", "user", "created", "revoked")
    for k in keys:
        table.add_row(*(literal(cell) for cell in (k.name, k.tenant, k.role, k.user_id or "",
                                                   k.created_at, k.revoked_at or "")))
    out.print(table)


@keys_app.command("revoke")
def keys_revoke(
    name: Annotated[str, typer.Argument(help="The key's name.")],
    lake: LakeOption = None,
) -> None:
    """Revoke a key: requests with it get 401 (within the service's key cache time)."""
    try:
        revoked = _store(lake).revoke(name)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    out.print(literal(f"revoked key {revoked.name} at {revoked.revoked_at}"))


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8700,
    workers: Annotated[int, typer.Option(
        help="Worker processes (each holds its own model, indexes and writer).")] = 1,
    no_embed: Annotated[bool, typer.Option(
        "--no-embed", help="Record turns without embeddings (text search only for them).")
    ] = False,
    no_index: Annotated[bool, typer.Option(
        "--no-index", help="Do not build indexes after commits (leave it to turnlake index).")
    ] = False,
    no_spool: Annotated[bool, typer.Option(
        "--no-spool", help="Answer a recording once it is committed, not once it is decided "
                           "and flushed to the server's spool (object-store lakes never "
                           "spool).")] = False,
    max_lag: Annotated[float | None, typer.Option(
        "--max-lag", help="Seconds a spooled recording may wait to become searchable before "
                          "the server holds new recordings (record_max_lag_s, default 0.5; "
                          "0: never hold).")] = None,
    workspace: Annotated[Path | None, typer.Option(
        help="Folder of this machine that POST /v1/pull and the MCP pull_files tool write "
             "into (relative folders below it); without it, pulls are refused.")] = None,
    memory_budget: Annotated[str | None, typer.Option(
        help="Bytes of partition indexes each worker keeps open for search (800MB, 2GB): "
             "past it the least recently used are closed (search_memory_budget, "
             "TURNLAKE_MEMORY_BUDGET; default no limit).")] = None,
    lake: LakeOption = None,
) -> None:
    """Serve the lake over HTTP: record turns, search, catalog, turns, refs, erase."""
    import uvicorn

    from pipeline.service.app import (
        ENV_LAKE,
        ENV_MAX_LAG,
        ENV_NO_EMBED,
        ENV_NO_INDEX,
        ENV_NO_SPOOL,
        ENV_WORKSPACE,
    )

    settings = settings_from(lake)
    if workers < 1:
        raise fail(TurnlakeError(f"--workers must be 1 or more, not {workers}"))
    if max_lag is not None and not (math.isfinite(max_lag) and max_lag >= 0):
        raise fail(TurnlakeError(f"--max-lag must be a number of seconds >= 0, not {max_lag}"))
    # The workers build their apps from the environment (uvicorn starts them by import path).
    os.environ[ENV_LAKE] = str(settings.lake)
    os.environ[ENV_NO_EMBED] = "1" if no_embed else ""
    os.environ[ENV_NO_INDEX] = "1" if no_index else ""
    os.environ[ENV_NO_SPOOL] = "1" if no_spool else ""
    os.environ[ENV_MAX_LAG] = "" if max_lag is None else repr(max_lag)
    os.environ[ENV_WORKSPACE] = str(workspace.resolve()) if workspace else ""
    if memory_budget is not None:
        from lake.index.opened import parse_budget

        try:
            parse_budget(memory_budget)
        except TurnlakeError as exc:
            raise fail(exc) from None
        os.environ["TURNLAKE_MEMORY_BUDGET"] = memory_budget  # read by Settings.from_env
    console.print(literal(f"serving {settings.lake} on http://{host}:{port} "
                          f"({workers} worker{'s' if workers > 1 else ''}); OpenAPI at /docs"))
    if isinstance(settings.lake, Path) and not (settings.lake / "_keys").is_dir():
        # Every request would get 401 (no key is known here): say why before the first one.
        console.print(literal(f"note: {settings.lake} holds no API key yet (check --lake); "
                              f"make one with `turnlake keys create --lake {settings.lake} "
                              "--tenant T --role ...`"))
    uvicorn.run("pipeline.service.app:app_from_env", factory=True, host=host, port=port,
                workers=workers, log_level="warning", access_log=False)
