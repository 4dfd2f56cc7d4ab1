"""The ``agentreplay`` command line: thin typer shells over plain functions that return data."""

from agentreplay.cli.app import app, main

__all__ = ["app", "main"]
