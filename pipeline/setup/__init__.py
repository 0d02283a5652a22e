"""``turnlake setup AGENT``: wire turnlake's hooks and MCP server into an agent's own
configuration files, merging with what is there and taking out exactly what it added.

:mod:`pipeline.setup.jsonfiles` is the shared core (JSON config files: read, merge, remove
our entries, show the change, write atomically), :mod:`pipeline.setup.tomlfiles` its TOML
counterpart (Codex's ``config.toml``, comments and layout kept), and
:mod:`pipeline.setup.common` what every agent shares (target, options, the ``turnlake``
program, telling our entries from the user's). One module per agent says which files and
which entries: :mod:`~pipeline.setup.claude_code`, :mod:`~pipeline.setup.codex`,
:mod:`~pipeline.setup.gemini_cli`, :mod:`~pipeline.setup.copilot_cli`.
"""
