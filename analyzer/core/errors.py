"""The one error hierarchy. Only ``stallscope.commands.main`` turns these into a message and an exit code."""

from __future__ import annotations


class StallscopeError(Exception):
    """Base of every error stallscope reports to a user (exit code 2, one line, no traceback)."""

    exit_code = 2


class TraceError(StallscopeError):
    """A trace that cannot be used at all: missing, unreadable, not a trace, no events."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class UsageError(StallscopeError):
    """A command line or option that makes no sense (bad --rank, unwritable --json path...)."""
