"""A failed step of the service is logged as one line when the lake is the cause, with its
traceback otherwise (pipeline.service.failures)."""

from __future__ import annotations

import logging

import pytest

from lake.errors import LakeError
from pipeline.service.failures import log_failure

LOG = logging.getLogger("turnlake.test.failures")


def _raised(exc: Exception) -> Exception:
    try:
        raise exc
    except Exception as caught:
        return caught


def test_the_lakes_failures_are_one_line_naming_the_cause(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOG.name):
        log_failure(LOG, "committing %d answered group(s) failed",
                    _raised(LakeError("s3://bucket/lake: SlowDown")), 3)
        log_failure(LOG, "index build failed", _raised(OSError(28, "No space left on device")))
    first, second = caplog.records
    assert first.levelno == logging.WARNING and first.exc_info is None
    assert first.getMessage() == ("committing 3 answered group(s) failed: LakeError: "
                                  "s3://bucket/lake: SlowDown")
    assert second.exc_info is None and "No space left on device" in second.getMessage()


def test_anything_else_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOG.name):
        log_failure(LOG, "committing %d answered group(s) failed",
                    _raised(KeyError("tenant")), 1)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.getMessage() == "committing 1 answered group(s) failed"
