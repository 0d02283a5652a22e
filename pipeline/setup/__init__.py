"""``turnlake setup AGENT``: wire turnlake's hooks and MCP server into an agent's own
configuration files, merging with what is there and taking out exactly what it added.

:mod:`pipeline.setup.jsonfiles` is the shared core (JSON config files: read, merge, remove
our entries, show the change, write atomically); one module per agent says which files and
which entries (:mod:`pipeline.setup.claude_code`).
"""
