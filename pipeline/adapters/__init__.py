"""Adapters that record turns from agent frameworks through the recorder."""
