"""What producers and batchers share: finding the Coordinator to run in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import FailedPreconditionError
from .._runtime.context import current_coordinator, current_session

if TYPE_CHECKING:
    from .._runtime.coordinator import Coordinator

__all__ = ["resolve_coordinator"]


def resolve_coordinator(coord: Coordinator | None, what: str) -> Coordinator:
    """Return ``coord``, else the current Coordinator, else the current Session's.

    Raises:
        FailedPreconditionError: if there is none: the runner tasks would have no owner.
    """
    if coord is not None:
        return coord
    found = current_coordinator()
    if found is None:
        session = current_session()
        if session is not None:
            found = session.coord
    if found is None:
        raise FailedPreconditionError(
            f"{what}() needs a Coordinator to run its queue runner in: call it inside "
            "'async with asyncreader.Coordinator()' (or a Session), or pass coord="
        )
    return found
