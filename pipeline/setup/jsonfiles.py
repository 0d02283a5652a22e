"""The shared core of ``turnlake setup``: an agent's JSON configuration files, changed in
memory, shown as a diff, and written back only when something changed.

An agent module builds a :class:`Change` per file: it loads the file (a missing file is an
empty object), edits ``data`` with the helpers here, and the command either prints the diffs
(``--dry-run``) or writes the files. Entries are recognised as ours by a predicate the agent
module gives (a hook command that runs ``turnlake hook ...``, an MCP server named ``turnlake``
that runs turnlake), so ``--remove`` takes out exactly those and leaves every other hook,
server and key in place.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lake.errors import TurnlakeError

Entry = dict[str, Any]


@dataclass
class Change:
    """One configuration file: what it held, what it will hold, and what was done to it."""

    path: Path
    before: dict[str, Any]
    data: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> Change:
        """The file's JSON object (empty when the file does not exist); TurnlakeError naming
        the file when it is not a JSON object."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(path, {}, {})
        except OSError as exc:
            raise TurnlakeError(f"cannot read {path}: {exc}") from None
        try:
            value = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as exc:
            raise TurnlakeError(f"{path} is not valid JSON (line {exc.lineno}, column "
                                f"{exc.colno}: {exc.msg}); fix it or move it away first") from None
        if not isinstance(value, dict):
            raise TurnlakeError(f"{path} does not hold a JSON object")
        return cls(path, value, copy.deepcopy(value))

    @property
    def changed(self) -> bool:
        """Whether the file's content would change."""
        return self.data != self.before

    def diff(self) -> str:
        """A unified diff of the file's JSON, before and after."""
        return "".join(difflib.unified_diff(
            _render(self.before).splitlines(keepends=True) if self.before else [],
            _render(self.data).splitlines(keepends=True),
            fromfile=f"{self.path} (now)", tofile=f"{self.path} (after)"))

    def write(self) -> None:
        """Write the new content atomically (a temporary file renamed over the old one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.turnlake-tmp")
        temporary.write_text(_render(self.data), encoding="utf-8")
        if self.path.exists():
            os.chmod(temporary, self.path.stat().st_mode & 0o777)
        os.replace(temporary, self.path)


def _render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def section(data: dict[str, Any], key: str, where: Path) -> dict[str, Any]:
    """``data[key]``, created as an empty object when missing; TurnlakeError when it holds
    something else."""
    value = data.setdefault(key, {})
    if not isinstance(value, dict):
        raise TurnlakeError(f'"{key}" in {where} is not a JSON object')
    return value


def put_hook(hooks: dict[str, Any], event: str, hook: Entry, ours: Callable[[Entry], bool],
             where: Path) -> str:
    """Put ``hook`` (one ``{"type": "command", ...}``) under ``hooks[event]``: in place of
    the hook of ours already there (kept in its group), else as a group of its own after the
    others. Returns what was done ("added", "updated", "unchanged")."""
    groups = hooks.setdefault(event, [])
    if not isinstance(groups, list):
        raise TurnlakeError(f'hooks "{event}" in {where} is not a list')
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list):
            continue
        for n, existing in enumerate(inner):
            if isinstance(existing, dict) and ours(existing):
                if existing == hook:
                    return "unchanged"
                inner[n] = hook
                return "updated"
    groups.append({"hooks": [hook]})
    return "added"


def drop_hooks(hooks: dict[str, Any], ours: Callable[[Entry], bool],
               events: tuple[str, ...] | None = None) -> list[str]:
    """Take our hooks out of every event (or of ``events``); a group left without hooks
    goes, and an event left without groups. Returns the events a hook was taken from."""
    touched: list[str] = []
    for event in [e for e in hooks if events is None or e in events]:
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept_groups = []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list):
                kept_groups.append(group)
                continue
            kept = [h for h in inner if not (isinstance(h, dict) and ours(h))]
            if len(kept) != len(inner) and event not in touched:
                touched.append(event)
            if kept:
                kept_groups.append({**group, "hooks": kept})
        if event not in touched:
            continue
        if kept_groups:
            hooks[event] = kept_groups
        else:
            del hooks[event]
    return touched


def drop_empty(data: dict[str, Any], key: str) -> None:
    """Remove ``data[key]`` when removing our entries left it an empty object."""
    if data.get(key) == {}:
        del data[key]
