"""How the service logs a step that failed and will be retried."""

from __future__ import annotations

import logging

from lake.errors import LakeError


def log_failure(logger: logging.Logger, message: str, exc: BaseException,
                *args: object) -> None:
    """Log a failed step: one line naming the cause when it is the lake's (a store that
    does not answer, a full disk: the step is retried, and a traceback every two seconds
    would bury the log), the traceback when it is anything else (a bug)."""
    if isinstance(exc, LakeError | OSError):
        logger.warning(message + ": %s: %s", *args, type(exc).__name__, exc)
    else:
        logger.error(message, *args, exc_info=exc)
