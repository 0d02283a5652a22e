"""The TOML counterpart of :mod:`pipeline.setup.jsonfiles`, for Codex's ``config.toml``:
the file is parsed with tomlkit, which keeps the user's comments, order and formatting, so
the only lines that change are the ones setup adds or takes out."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path

import tomlkit
from tomlkit.exceptions import ParseError
from tomlkit.toml_document import TOMLDocument

from lake.errors import TurnlakeError


@dataclass
class TomlChange:
    """One TOML configuration file: its text as it was, the document it will hold, and what
    was done to it."""

    path: Path
    before: str
    data: TOMLDocument
    notes: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> TomlChange:
        """The file's document (empty when the file does not exist); TurnlakeError naming
        the file and the place when it is not valid TOML."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(path, "", tomlkit.document())
        except OSError as exc:
            raise TurnlakeError(f"cannot read {path}: {exc}") from None
        try:
            return cls(path, text, tomlkit.parse(text))
        except ParseError as exc:
            raise TurnlakeError(f"{path} is not valid TOML (line {exc.line}, column "
                                f"{exc.col}); fix it or move it away first") from None

    @property
    def text(self) -> str:
        """The file's new text (empty when only blank lines are left)."""
        text = tomlkit.dumps(self.data)
        return text if text.strip() else ""

    @property
    def changed(self) -> bool:
        """Whether the file's content would change."""
        return self.text != self.before

    def diff(self) -> str:
        """A unified diff of the file, before and after."""
        return "".join(difflib.unified_diff(
            self.before.splitlines(keepends=True), self.text.splitlines(keepends=True),
            fromfile=f"{self.path} (now)", tofile=f"{self.path} (after)"))

    def write(self) -> None:
        """Write the new content atomically (a temporary file renamed over the old one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.turnlake-tmp")
        temporary.write_text(self.text, encoding="utf-8")
        if self.path.exists():
            os.chmod(temporary, self.path.stat().st_mode & 0o777)
        os.replace(temporary, self.path)
