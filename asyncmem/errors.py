"""The exceptions asyncmem raises, all rooted at :class:`AsyncmemError`.

::

    AsyncmemError
    ├── InvalidInputError (also ValueError)   bad ids, values, metadata, limits: nothing was changed
    ├── BackendUnavailableError               cannot connect, authenticate, or the backend timed out
    ├── BackendError                          anything else from below; the original is chained
    ├── SchemaError                           the database schema is older or newer than the code
    └── BackendClosedError                    the backend was used after ``aclose()``

Messages never carry stored values, SQL parameters or credentials: they name the operation and
the kind of failure. The driver's exception, when there is one, is ``__cause__``.
"""

from __future__ import annotations

__all__ = [
    "AsyncmemError",
    "BackendClosedError",
    "BackendError",
    "BackendUnavailableError",
    "InvalidInputError",
    "SchemaError",
]


class AsyncmemError(Exception):
    """Root of every error asyncmem raises on purpose."""


class InvalidInputError(AsyncmemError, ValueError):
    """An argument breaks the contract; the call changed nothing."""


class BackendUnavailableError(AsyncmemError):
    """The backend cannot be reached, refused our credentials, or timed out."""


class BackendError(AsyncmemError):
    """The backend failed in a way not covered by a more specific error."""


class SchemaError(AsyncmemError):
    """The database schema does not match this version of asyncmem."""


class BackendClosedError(AsyncmemError):
    """The backend was used after it was closed."""
