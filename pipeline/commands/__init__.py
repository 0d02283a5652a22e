"""The turnlake CLI commands, one module per family."""
