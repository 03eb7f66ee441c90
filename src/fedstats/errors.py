"""Exceptions raised by fedstats.

Every error a user can cause derives from :class:`FedstatsError`; those caused by a bad value also derive
from :class:`ValueError`, so generic ``except ValueError`` handlers keep working. Messages name the
parameter exactly as the user passed it and the accepted range, never an internal function.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BudgetExceededError",
    "ChecksumError",
    "DataError",
    "DatasetNotFoundError",
    "FedstatsError",
    "OverflowRiskError",
    "ParameterError",
    "ProtocolAbortError",
    "SecurityError",
    "UnavailableError",
]


class FedstatsError(Exception):
    """Base class of every error fedstats raises on purpose."""


class ParameterError(FedstatsError, ValueError):
    """A parameter is outside its accepted range.

    Parameters
    ----------
    name : str
        The parameter's name as the user spells it (``"epsilon"``, ``"--clients"``).
    value : object
        The value that was passed.
    accepted : str
        The accepted values in words, e.g. ``"a float in (0, inf)"``.
    """

    def __init__(self, name: str, value: Any, accepted: str) -> None:
        self.name = name
        self.value = value
        self.accepted = accepted
        super().__init__(f"{name}={value!r} is invalid: expected {accepted}")


class DataError(FedstatsError, ValueError):
    """Input data is unusable (NaN or inf, negative counts, missing column, empty population, ...)."""


class DatasetNotFoundError(FedstatsError, FileNotFoundError):
    """A dataset or file the user named does not exist where it was looked for."""


class ChecksumError(FedstatsError):
    """A data file's SHA-256 differs from the recorded one (corrupt or substituted file)."""


class BudgetExceededError(FedstatsError):
    """A release would exceed the privacy budget of a :class:`~fedstats.privacy.ledger.PrivacyLedger`."""


class OverflowRiskError(FedstatsError, ValueError):
    """A sum of client reports could exceed its modulus or integer range, so it is refused."""


class ProtocolAbortError(FedstatsError):
    """A protocol stopped without a result (for example fewer surviving clients than the threshold)."""


class SecurityError(FedstatsError):
    """A cryptographic check failed or a request would break the protocol's security (never retried)."""


class UnavailableError(FedstatsError):
    """A party the operation needs (a peer aggregator) cannot be reached now; retrying later may succeed.

    Parameters
    ----------
    message : str
        What could not be reached, and why.
    retry_after : float
        Seconds after which a retry is reasonable (> 0; the HTTP answer's ``Retry-After``).
    """

    def __init__(self, message: str, retry_after: float = 5.0) -> None:
        self.retry_after = retry_after
        super().__init__(message)
