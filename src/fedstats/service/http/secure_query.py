"""The plain query strings of the secure-run routes, parsed without FastAPI (:mod:`.secure`'s direct routes).

A device's ``wait=25``, ``members=3,17`` or ``also=4,9`` is parsed here, once per request; anything
else goes to FastAPI's parsing and its errors.
"""

from __future__ import annotations

import re
from typing import Any, cast

from fastapi import HTTPException

__all__ = ["plain_query", "positions"]

# the query parameters a direct route (:func:`~.fastpath.direct_route`) parses itself, each in its plain
# form (a device's ``wait=25``, ``members=3,17``); anything else goes to FastAPI's parsing and its errors
# (``members`` after ``%2C`` -> ``,``; how many positions is checked by the endpoint, as on FastAPI's way)
_PLAIN_VALUES = {
    b"wait": re.compile(rb"[0-9]{1,6}(?:\.[0-9]{1,6})?"),
    b"members": re.compile(rb"[0-9]{1,6}(?:,[0-9]{1,6})*"),
    b"also": re.compile(rb"[0-9]{1,6}(?:,[0-9]{1,6})*"),
}
_PARSED = "fedstats.secure_query"  # the scope's key of the query parsed by ``plain_query``


def plain_query(scope: Any, names: tuple[bytes, ...]) -> dict[bytes, str] | None:
    """The query's parameters among ``names``, each once and plain (see above), else None (FastAPI's).

    Parsed once per request (kept in the scope: the route's check and its handler both ask).
    """
    parsed = scope.get(_PARSED)
    if parsed is not None and parsed[0] == names:
        return cast(dict[bytes, str] | None, parsed[1])
    query: bytes = scope.get("query_string") or b""
    got: dict[bytes, str] = {}
    plain = True
    for part in query.split(b"&") if query else ():
        name, eq, value = part.partition(b"=")
        value = value.replace(b"%2C", b",").replace(b"%2c", b",")
        if not eq or name not in names or name in got or not _PLAIN_VALUES[name].fullmatch(value):
            plain = False
            break
        got[name] = value.decode("ascii")
    scope[_PARSED] = (names, got if plain else None)
    return got if plain else None


_MAX_POSITIONS = 4096


_POSITIONS = re.compile(r"[0-9]{1,6}(?:,[0-9]{1,6})*")


def positions(text: str) -> list[int]:
    """Parse ``?members=``: comma-separated distinct roster positions (at most 4096)."""
    parts = text.split(",") if text else []
    # ASCII digits only: str.isdigit also takes "²", which int() refuses (that was a 500)
    if len(parts) > _MAX_POSITIONS or not (not text or _POSITIONS.fullmatch(text)):
        raise HTTPException(422, "members must be at most 4096 comma-separated positions")
    got = list(map(int, parts))
    if len(set(got)) != len(got):
        raise HTTPException(422, "members must be distinct positions")
    return got
