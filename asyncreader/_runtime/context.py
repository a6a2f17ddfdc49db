"""The *current* Session and Coordinator, kept in context variables.

``async with Coordinator()`` / ``async with Session()`` make themselves current for the code
in the block and for every task started inside it (tasks copy the context when they start),
so producers, batchers, queues and readers built there find them without being passed one.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .checkpoint import Checkpointer
    from .coordinator import Coordinator
    from .session import Session

__all__ = ["current_checkpointer", "current_coordinator", "current_session", "track"]

_session: ContextVar[Session | None] = ContextVar("asyncreader_session", default=None)
_coordinator: ContextVar[Coordinator | None] = ContextVar("asyncreader_coordinator", default=None)


def current_session() -> Session | None:
    """Return the Session whose block is running, or ``None``."""
    return _session.get()


def current_checkpointer() -> Checkpointer | None:
    """Return the checkpoint bookkeeping of the Session whose block is running, or ``None``.

    Stages built in a Session register with it and run their tasks as its stage tasks.
    """
    session = _session.get()
    return None if session is None else session._checkpointer


def current_coordinator() -> Coordinator | None:
    """Return the Coordinator whose block is running, or ``None``."""
    return _coordinator.get()


def track(resource: object) -> None:
    """Hand ``resource`` to the current Session (if any), which closes it when it ends."""
    session = _session.get()
    if session is not None:
        session._track(resource)
