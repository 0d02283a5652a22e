"""Reusable rendering pieces of the workbench pages."""
