"""Commands of the retention family: ``retention apply``, ``retention purge`` and ``erase``."""

from __future__ import annotations

import os
import re
from typing import Annotated

import typer

from lake.analytics import lake_tenants
from lake.deletion.target import ErasureTarget
from lake.errors import QueryError, TurnlakeError
from lake.settings import RetentionRule, Settings, save_policy
from lake.store import LakeStore
from pipeline.commands.common import (
    LakeOption,
    app,
    console,
    erase_settler,
    existing_lake,
    fail,
    literal,
    out,
    settings_from,
    styled,
)
from pipeline.contract import parse_time
from pipeline.progress import job_progress
from pipeline.retention import RetentionJobReport, apply_policy, erase, purge

retention_app = typer.Typer(no_args_is_help=True,
                            help="Apply the retention policy and purge expired data.")
app.add_typer(retention_app, name="retention")

DryRunOption = Annotated[bool, typer.Option("--dry-run", help="Print what would change; "
                                            "write nothing.")]
ActorOption = Annotated[str | None, typer.Option(
    "--actor", help="Who runs the job, for the audit row (default: $USER, else 'cli').")]
_RULE = re.compile(r"^([A-Za-z0-9_-]+)(?::([A-Za-z0-9_-]*))?(?::([a-z]+))?=(\d{1,6})$")
_SAMPLE = 20


def _actor(actor: str | None) -> str:
    return actor or os.environ.get("USER") or "cli"


def parse_rule(text: str) -> RetentionRule:
    """``TENANT[:APP[:ROLE]]=DAYS`` (APP may be empty: ``acme::note=7``) as a rule."""
    match = _RULE.match(text)
    if match is None or int(match.group(4)) < 1:
        raise QueryError(f"--rule {text!r} is not TENANT[:APP[:ROLE]]=DAYS with DAYS >= 1")
    tenant, app_id, role, days = match.groups()
    return RetentionRule(tenant=tenant, ttl_days=int(days), app=app_id or None,
                         role=role or None)


def _with_policy(settings: Settings, rules: list[str] | None,
                 default_ttl_days: int | None) -> Settings:
    changes: dict[str, object] = {}
    if rules:
        changes["retention"] = tuple(parse_rule(r) for r in rules)
    if default_ttl_days is not None:
        if default_ttl_days < 1:
            raise QueryError("--default-ttl-days must be >= 1")
        changes["default_ttl_days"] = default_ttl_days
    return settings.with_(**changes) if changes else settings


def _print_job(report: RetentionJobReport, verb: str) -> None:
    plan = report.plan
    for pending in report.pending:
        console.print(styled((f"interrupted job {pending.job_id} ({pending.describe()}) will "
                              "be finished by the next run", "yellow")))
    for done in report.resumed:
        console.print(literal(f"finished interrupted job {done.plan.job_id} "
                              f"({done.plan.describe()})"))
    counts = ", ".join(f"{n} {name}" for name, n in plan.counts.items())
    if report.dry_run:
        out.print(literal(f"dry run: {verb} {plan.describe()} would remove {counts}"))
        for tenant, cid, tid in plan.turn_dirs[:_SAMPLE]:
            out.print(literal(f"  would remove turn {tenant}/{cid}/{tid}"))
        if len(plan.turn_dirs) > _SAMPLE:
            out.print(f"  ... and {len(plan.turn_dirs) - _SAMPLE} more turns")
        return
    outcome = report.outcome
    assert outcome is not None
    out.print(literal(f"{verb} {plan.describe()}: removed {counts}; {outcome.vacuumed_files} "
                      f"old data files vacuumed, {outcome.log_files_removed} log files removed "
                      f"({report.seconds:.2f}s, job {plan.job_id})"))


def _say_if_nothing_matched(report: RetentionJobReport, tenant: str) -> None:
    """An erase whose target matched nothing says so: erasing is idempotent (exit 0), but a
    mistyped id must not pass for a done erasure."""
    if not report.plan.is_empty:
        return
    what = report.plan.describe()
    done = "would be" if report.dry_run else "was"
    console.print(styled(("note:", "yellow"), f" no data of {what} in tenant {tenant} matched: "
                         f"nothing {done} erased (check the tenant and the id)"))


def _say_tenants_without_data(settings: Settings, rules: list[str] | None,
                              dry_run: bool) -> None:
    """A --rule for a tenant the lake holds no data of is said: setting a policy before data
    arrives is fine, but a mistyped tenant must not pass for a rule that took effect."""
    tenants = sorted({parse_rule(r).tenant for r in rules or ()})
    if not tenants:
        return
    stored = set(lake_tenants(LakeStore(settings.lake)))
    saved = "would be saved" if dry_run else "is saved"
    for tenant in tenants:
        if tenant not in stored:
            console.print(styled(
                ("note:", "yellow"),
                f" the lake has no data of tenant {tenant}: its rule {saved} and applies to "
                "data that arrives later (check the tenant id)"))


@retention_app.command("apply")
def retention_apply(
    dry_run: DryRunOption = False,
    rule: Annotated[list[str] | None, typer.Option(
        "--rule", help="TTL rule TENANT[:APP[:ROLE]]=DAYS (repeatable; replaces the "
        "lake's saved rules, and is saved for later ingests).")] = None,
    default_ttl_days: Annotated[int | None, typer.Option(
        help="TTL when no rule applies (default: the configured one, 365).")] = None,
    actor: ActorOption = None,
    lake: LakeOption = None,
) -> None:
    """Recompute expires_at of stored rows from the retention policy (record ttl_days wins)."""
    # Saving rules may come before the first ingest (every later command reads them); anything
    # else only reads or rewrites stored rows, so it needs a lake that exists.
    saves = not dry_run and (bool(rule) or default_ttl_days is not None)
    base = settings_from(lake) if saves else existing_lake(lake)
    try:
        settings = _with_policy(base, rule, default_ttl_days)
        with job_progress() as progress:
            report = apply_policy(settings, dry_run=dry_run, actor=_actor(actor),
                                  on_partition=progress.partitions("recomputing expiry"))
        if not dry_run and (rule or default_ttl_days is not None):
            saved = save_policy(settings)
            out.print(literal(f"saved the retention policy to {saved}"))
        _say_tenants_without_data(settings, rule, dry_run)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    prefix = "dry run: would change" if dry_run else "changed"
    tables = ", ".join(f"{n} {t}" for t, n in report.changed.items()) or "nothing"
    expired = sum(report.newly_expired.values())
    out.print(f"{prefix} expires_at of {tables} in {report.partitions} partition(s); "
              f"{expired} rows newly expired, {sum(report.revived.values())} no longer expired")
    if not dry_run:
        out.print(f"refreshed {report.timelines_refreshed} timelines, rebuilt "
                  f"{report.indexes_rebuilt} partition index(es) ({report.seconds:.2f}s)")
        if expired:
            out.print("expired rows are hidden now; `turnlake retention purge` removes them")


@retention_app.command("purge")
def retention_purge(
    dry_run: DryRunOption = False,
    as_of: Annotated[str | None, typer.Option(
        help="Purge what expired at or before this time (ISO; default now).")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    actor: ActorOption = None,
    lake: LakeOption = None,
) -> None:
    """Delete expired TurnLogs, rows, events, files and bytes; rebuild indexes; vacuum."""
    settings = existing_lake(lake)
    try:
        when = parse_time(as_of, "as_of")
        with job_progress() as progress:
            report = purge(settings, as_of=when, tenant=tenant, dry_run=dry_run,
                           actor=_actor(actor), on_step=progress.partitions("purging"),
                           on_partition=progress.partitions("rebuilding indexes"))
    except TurnlakeError as exc:
        raise fail(exc) from exc
    _print_job(report, "purge")


def erasure_target(tenant: str, *, user: str | None = None, conversation: str | None = None,
                   turn: str | None = None) -> ErasureTarget:
    """The target ``erase``'s options name (``--turn`` is ``C/T``), or a QueryError in their
    words."""
    given = [name for name, v in (("--user", user), ("--conversation", conversation),
                                  ("--turn", turn)) if v is not None]
    if len(given) != 1:
        raise QueryError("erase exactly one of --user U, --conversation C or --turn C/T "
                         f"(got {', '.join(given) or 'none'})")
    if turn is not None:
        cid, sep, tid = turn.partition("/")
        if not sep or not cid or not tid:
            raise QueryError(f"--turn must be CONVERSATION/TURN, not {turn!r}")
        return ErasureTarget(tenant, conversation_id=cid, turn_id=tid)
    return ErasureTarget(tenant, user_id=user, conversation_id=conversation)


@app.command("erase")
def erase_command(
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant of the data to erase.")],
    user: Annotated[str | None, typer.Option("--user", help="Erase this user.")] = None,
    conversation: Annotated[str | None, typer.Option(
        "--conversation", help="Erase this conversation.")] = None,
    turn: Annotated[str | None, typer.Option("--turn", help="Erase this turn (C/T).")] = None,
    dry_run: DryRunOption = False,
    actor: ActorOption = None,
    lake: LakeOption = None,
) -> None:
    """Erase a user, conversation or turn now, whatever its TTL (right to be forgotten)."""
    try:
        target = erasure_target(tenant, user=user, conversation=conversation, turn=turn)
        settings = existing_lake(lake)
        with job_progress() as progress:
            report = erase(settings, target, actor=_actor(actor),
                           settle=erase_settler(settings), dry_run=dry_run,
                           on_step=progress.partitions("erasing"),
                           on_partition=progress.partitions("rebuilding indexes"))
    except TurnlakeError as exc:
        raise fail(exc) from exc
    _print_job(report, "erase")
    _say_if_nothing_matched(report, tenant)


__all__ = ["app", "parse_rule"]
