"""What every agent's ``turnlake setup`` shares: where the turns go, the options, the
``turnlake`` program to name in hooks, and telling our entries from the user's."""

from __future__ import annotations

import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lake.errors import TurnlakeError

SERVER_NAME = "turnlake"
# The environment variable an MCP client reads the user key from: never written into a file.
KEY_ENV = "TURNLAKE_KEY"
SCOPES = ("user", "project")


@dataclass(frozen=True)
class Target:
    """Where the turns go: a lake folder, or a ``turnlake serve`` URL (key from the
    environment)."""

    lake: Path | None = None
    server: str | None = None

    def __post_init__(self) -> None:
        if (self.lake is None) == (self.server is None):
            raise TurnlakeError("give --lake FOLDER or --server URL (one of them)")
        if self.server is not None and not self.server.startswith(("http://", "https://")):
            raise TurnlakeError(f"--server must be an http(s) URL, got {self.server!r}")

    def options(self) -> list[str]:
        """The command-line options that point a turnlake command at this target."""
        if self.server is not None:
            return ["--server", self.server]
        assert self.lake is not None
        return ["--lake", str(self.lake.expanduser().resolve())]

    @property
    def mcp_url(self) -> str:
        """The server's MCP endpoint (``--server`` only)."""
        assert self.server is not None
        return self.server.rstrip("/") + "/mcp/"


@dataclass(frozen=True)
class Options:
    """What ``turnlake setup AGENT`` was asked for."""

    tenant: str
    user: str
    target: Target
    scope: str = "user"
    project: Path = Path(".")
    recall: bool = False
    home: Path | None = None

    def root(self) -> Path:
        """The folder the agent's files are under: the home folder (``--scope user``) or the
        project (``--scope project``); TurnlakeError for another scope."""
        if self.scope not in SCOPES:
            raise TurnlakeError(f"--scope must be user or project, got {self.scope!r}")
        return (self.home or Path.home()) if self.scope == "user" else self.project.resolve()


def turnlake_executable() -> str:
    """The absolute path of the ``turnlake`` command that is running (else the one installed
    beside this interpreter, else the one on PATH, else ``python -m pipeline.cli`` of this
    interpreter)."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "turnlake" and argv0.exists():
        return str(argv0.absolute())
    # The script installed beside this interpreter (a virtualenv's bin folder).
    beside = Path(sys.executable).parent / "turnlake"
    if beside.is_file():
        return str(beside.absolute())
    found = shutil.which("turnlake")
    if found:
        return str(Path(found).resolve())
    return f"{shlex.quote(sys.executable)} -m pipeline.cli"


def command_argv(exe: str, *args: str) -> list[str]:
    """The program's words (``exe`` may be ``python -m pipeline.cli``) followed by ``args``."""
    return [*shlex.split(exe), *args]


def hook_argv(exe: str, command: str, options: Options) -> list[str]:
    """``turnlake hook COMMAND`` for the options' identity and target, as words."""
    return command_argv(exe, "hook", command, "--tenant", options.tenant, "--user",
                        options.user, *options.target.options())


def hook_command(exe: str, command: str, options: Options) -> str:
    """``turnlake hook COMMAND ...`` as one shell command line."""
    words = hook_argv(exe, command, options)
    # The executable may be "python -m pipeline.cli": already quoted, kept whole.
    return " ".join([exe] + [shlex.quote(w) for w in words[len(shlex.split(exe)):]])


def mcp_argv(exe: str, options: Options) -> list[str]:
    """``turnlake mcp`` over the options' lake, as words (the program first)."""
    assert options.target.lake is not None
    return command_argv(exe, "mcp", "--lake", str(options.target.lake.expanduser().resolve()),
                        "--tenant", options.tenant, "--user", options.user)


def runs_turnlake(words: list[str]) -> list[str] | None:
    """The words after the turnlake program (``turnlake`` or ``python -m pipeline.cli``), or
    None when the words run something else."""
    if words and Path(words[0]).name == "turnlake":
        return words[1:]
    if len(words) >= 3 and words[1:3] == ["-m", "pipeline.cli"]:
        return words[3:]
    return None


def runs_hook(words: list[str], commands: tuple[str, ...]) -> bool:
    """Whether the words run ``turnlake hook C`` for one of ``commands``."""
    rest = runs_turnlake(words)
    return rest is not None and len(rest) >= 2 and rest[0] == "hook" and rest[1] in commands


def shell_runs_hook(command: Any, commands: tuple[str, ...]) -> bool:
    """Whether a shell command line runs ``turnlake hook C`` for one of ``commands``."""
    if not isinstance(command, str):
        return False
    try:
        return runs_hook(shlex.split(command), commands)
    except ValueError:
        return False


def runs_mcp(command: Any, args: Any) -> bool:
    """Whether ``command`` with ``args`` runs ``turnlake mcp``."""
    if not isinstance(command, str):
        return False
    words = [command, *(a for a in args if isinstance(a, str))] if isinstance(
        args, list) else [command]
    rest = runs_turnlake(words)
    return rest is not None and rest[:1] == ["mcp"]


def bearer_header() -> str:
    """The Authorization header's value as an agent expands it from the environment."""
    return f"Bearer ${{{KEY_ENV}}}"


def put_server(servers: dict[str, Any], server: dict[str, Any], ours: Any, where: Path
               ) -> str:
    """Put our MCP server under ``servers[SERVER_NAME]``; TurnlakeError when another server
    of that name is there. Returns what was done ("added", "updated", "unchanged")."""
    existing = servers.get(SERVER_NAME)
    if existing is not None and not (isinstance(existing, dict) and ours(existing)):
        raise TurnlakeError(f'{where} already has an MCP server "{SERVER_NAME}" that '
                            "turnlake setup did not write; rename or remove it first")
    servers[SERVER_NAME] = server
    return "unchanged" if existing == server else "updated" if existing else "added"


def take_server(servers: Any, ours: Any) -> bool:
    """Remove our MCP server from ``servers``; whether one was there."""
    if not isinstance(servers, dict):
        return False
    existing = servers.get(SERVER_NAME)
    if isinstance(existing, dict) and ours(existing):
        del servers[SERVER_NAME]
        return True
    return False
