"""``turnlake members add|list|remove``: who may sign in to the workbench through OpenID
Connect, and as what (see docs/workbench.md)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table as RichTable

from lake.errors import TurnlakeError
from lake.members import MEMBER_ROLES, MemberStore
from pipeline.commands.common import LakeOption, app, existing_lake, fail, literal, out

members_app = typer.Typer(no_args_is_help=True,
                          help="Workbench members: the tenant and role of each sign-in email.")
app.add_typer(members_app, name="members")


def _store(lake: str | None) -> MemberStore:
    settings = existing_lake(lake)
    return MemberStore(settings.lake, s3=settings.s3)


@members_app.command("add")
def members_add(
    email: Annotated[str, typer.Argument(help="The email the identity provider signs in.")],
    tenant: Annotated[str, typer.Option("--tenant", help="The only tenant the member reads.")],
    role: Annotated[str, typer.Option("--role", help=f"One of {', '.join(MEMBER_ROLES)}.")],
    user: Annotated[str | None, typer.Option(
        "--user", help="The user a member of role user reads as (required for that role).")
    ] = None,
    lake: LakeOption = None,
) -> None:
    """Add a member (or replace the record of that email)."""
    try:
        member, replaced = _store(lake).add(email, tenant=tenant, role=role, user_id=user)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    out.print(literal(f"{'updated' if replaced else 'added'} member {member.email}: "
                      f"{member.role} of tenant {member.tenant}"
                      + (f", user {member.user_id}" if member.user_id else "")))


@members_app.command("list")
def members_list(lake: LakeOption = None) -> None:
    """List the members: email, tenant, role, user, added."""
    try:
        members = _store(lake).list()
    except TurnlakeError as exc:
        raise fail(exc) from exc
    table = RichTable("email", "tenant", "role", "user", "added")
    for m in members:
        table.add_row(*(literal(cell) for cell in (m.email, m.tenant, m.role, m.user_id or "",
                                                   m.added_at)))
    out.print(table)


@members_app.command("remove")
def members_remove(
    email: Annotated[str, typer.Argument(help="The member's email.")],
    lake: LakeOption = None,
) -> None:
    """Remove a member: the workbench signs them out at their next page run."""
    try:
        member = _store(lake).remove(email)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    out.print(literal(f"removed member {member.email} ({member.role} of tenant "
                      f"{member.tenant})"))
