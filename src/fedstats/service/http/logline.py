"""The server's JSON log lines: :class:`JsonLine` messages, :class:`JsonLogFormatter`, :func:`log_line`.

The access log writes one line per request (:class:`~fedstats.service.http.edge.EdgeMiddleware`), on by
default, so its cost is paid about fifteen times per device and secure run. Two parts of the standard
path were most of it and are done once here instead of per line, with the same output:

- the timestamp: ``datetime.fromtimestamp(...).isoformat(...)`` per record, now the second's text made
  once per second (:func:`utc_stamp`, the same text to the millisecond);
- the caller's frame: :meth:`logging.Logger.log` looks for its caller by walking the stack and normalizing
  each frame's file name; :func:`log_line` names its caller's frame directly (the record's ``pathname``,
  ``lineno`` and ``funcName`` are those ``Logger.log`` would have found).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import sys
from typing import Any

__all__ = ["JsonLine", "JsonLogFormatter", "log_line", "utc_stamp"]


class JsonLine(dict[str, Any]):
    """A structured log message: its fields, rendered as a JSON object by ``str()``.

    :class:`JsonLogFormatter` merges the fields into the line without parsing text back; any other
    formatter prints the JSON text (``record.getMessage()``).
    """

    def __str__(self) -> str:
        return json.dumps(self)


# json.dumps(obj, default=str), with its encoder made once
_ENCODE = json.JSONEncoder(default=str).encode

_second: tuple[int, str] = (0, "1970-01-01T00:00:00")  # the last second stamped, and its text


def utc_stamp(created: float) -> str:
    """``created`` as ISO 8601 in UTC with milliseconds (``2026-11-26T14:00:00.000Z``).

    The same text as ``datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")`` with
    ``+00:00`` written ``Z`` (microseconds rounded half to even, as ``datetime`` does, then cut to
    milliseconds), the date and time of day made once per second.

    Parameters
    ----------
    created : float
        Unix time in seconds (a log record's ``created``).

    Returns
    -------
    str
    """
    global _second
    frac, whole = math.modf(created)
    us = round(frac * 1e6)
    if us >= 1_000_000:
        us -= 1_000_000
        whole += 1.0
    elif us < 0:
        us += 1_000_000
        whole -= 1.0
    second = int(whole)
    known, text = _second  # one read: another thread may replace it meanwhile
    if known != second:
        text = _dt.datetime.fromtimestamp(second, _dt.UTC).replace(tzinfo=None).isoformat()
        _second = (second, text)
    return f"{text}.{us // 1000:03d}Z"


class JsonLogFormatter(logging.Formatter):
    """Log records as one JSON object per line: ``ts`` (ISO 8601, UTC), ``level``, ``logger``, fields.

    A message that is itself a JSON object (the server's structured events) is merged into the line;
    any other message goes in ``message``; an exception's traceback in ``traceback``.
    """

    def format(self, record: logging.LogRecord) -> str:
        """One JSON line for ``record``."""
        out: dict[str, Any] = {
            "ts": utc_stamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        if isinstance(record.msg, JsonLine) and not record.args:
            for k, v in record.msg.items():
                if k not in out:
                    out[k] = v
            if record.exc_info:
                out["traceback"] = self.formatException(record.exc_info)
            return _ENCODE(out)
        msg = record.getMessage()
        parsed: Any = None
        if msg.startswith("{"):
            try:
                parsed = json.loads(msg)
            except ValueError:
                parsed = None
        if isinstance(parsed, dict):
            out.update({k: v for k, v in parsed.items() if k not in out})
        else:
            out["message"] = msg
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def log_line(logger: logging.Logger, level: int, line: JsonLine) -> None:
    """``logger.log(level, line)`` for a caller that checked ``logger.isEnabledFor(level)``.

    The record is the one :meth:`logging.Logger.log` makes (its ``pathname``, ``lineno`` and
    ``funcName`` the caller's), handed to the logger's filters and handlers the same way, without the
    search of the stack for the caller.

    Parameters
    ----------
    logger : logging.Logger
    level : int
        A logging level (``logging.INFO``).
    line : JsonLine
        The message.
    """
    caller = sys._getframe(1)
    code = caller.f_code
    record = logger.makeRecord(
        logger.name, level, code.co_filename, caller.f_lineno, line, (), None, code.co_name
    )
    logger.handle(record)
