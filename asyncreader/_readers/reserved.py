"""Names a reader subclass must not take: the private attributes of ReaderBase itself.

ReaderBase keeps its state in ordinary attributes (``self._work``, ``self._buffer``,
``self._lock``, ...) because the hot paths read them directly. A subclass of your own that
assigns one of those names (a natural ``self._work = work`` in ``on_work_started``) would
silently replace the base's state and fail later, far from the cause. So when a subclass
outside the package is defined, the code of its methods is scanned for assignments to
``self.<reserved name>`` and for class attributes of a reserved name, and the class is
refused at once with a :class:`TypeError` naming the attribute and the method. The scan
reads bytecode, so it costs nothing at run time.
"""

from __future__ import annotations

import dis
import types
from typing import Any, Final

__all__ = ["check_subclass", "reserved_names"]

_PACKAGE: Final = __name__.split(".", 1)[0]
_STORES: Final = frozenset({"STORE_ATTR", "DELETE_ATTR"})

_reserved: dict[type, frozenset[str]] = {}


def _ours(cls: type) -> bool:
    """Whether ``cls`` is one of the package's own classes (public ones say
    ``__module__ == "asyncreader"``)."""
    module = cls.__module__
    return module == _PACKAGE or module.startswith(_PACKAGE + ".")


def _codes(obj: Any) -> list[types.CodeType]:
    """The code objects of a class attribute: a function, property or static/class method."""
    found: list[types.CodeType] = []
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        for part in (obj.fget, obj.fset, obj.fdel):
            found += _codes(part)
    elif isinstance(obj, types.FunctionType):
        found.append(obj.__code__)
    return found


def _self_stores(code: types.CodeType) -> list[str]:
    """Attributes that ``code`` assigns or deletes on its first argument (``self``),
    including in functions nested in it."""
    names: list[str] = []
    first = code.co_varnames[0] if code.co_argcount else None
    previous = None
    for instruction in dis.get_instructions(code):
        if (
            instruction.opname in _STORES
            and first is not None
            and previous is not None
            and previous.opname in ("LOAD_FAST", "LOAD_FAST_CHECK")
            and previous.argval == first
        ):
            names.append(str(instruction.argval))
        previous = instruction
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _self_stores(const)
    return names


def reserved_names(cls: type) -> frozenset[str]:
    """The private names that the package's classes among ``cls``'s bases (and ``cls``
    itself, if it is one) define or assign."""
    names: set[str] = set()
    for base in cls.__mro__:
        if not _ours(base):
            continue
        own = _reserved.get(base)
        if own is None:
            found: set[str] = set()
            for name, value in vars(base).items():
                if name.startswith("_") and not name.startswith(("__", "_abc_")):
                    found.add(name)
                for code in _codes(value):
                    found.update(n for n in _self_stores(code) if n.startswith("_"))
            slots = getattr(base, "__slots__", ())
            found.update(n for n in slots if n.startswith("_") and "__" not in n)
            own = _reserved[base] = frozenset(found)
        names |= own
    return frozenset(names)


def check_subclass(cls: type) -> None:
    """Refuse ``cls`` (a reader class from outside the package) if it takes a name that
    one of the package's classes it derives from uses for its own state.

    Raises:
        TypeError: naming the attribute and where ``cls`` takes it.
    """
    if _ours(cls):
        return
    reserved = reserved_names(cls.__mro__[1])
    base = next(b for b in cls.__mro__[1:] if _ours(b)).__name__
    for name, value in vars(cls).items():
        if name in reserved:
            raise TypeError(
                f"{cls.__name__}.{name}: {base} uses the name {name!r} for its own "
                "state; give yours another name"
            )
        for code in _codes(value):
            for attribute in _self_stores(code):
                if attribute in reserved:
                    raise TypeError(
                        f"{cls.__name__}.{name} assigns self.{attribute}, which {base} "
                        "uses for its own state; give yours another name"
                    )
