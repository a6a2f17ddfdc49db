"""CRC-32C (Castagnoli) and TensorFlow's masked form of it.

TFRecord files protect each record's length and payload with a *masked* CRC-32C
(SPEC §4.2): ``mask(c) = rotr(c, 15) + 0xA282EAD8 (mod 2**32)``. Masking keeps a CRC stored
inside data from checksumming to a fixed point when that data is itself checksummed.

The checksum itself runs in C, through ``google-crc32c`` (the dependency: Apache-2.0,
maintained with Google's own CRC code, abi3 wheels for every platform). The other C
binding, ``crc32c``, is used instead when it is installed. Measured on one machine
(x86-64 with SSE4.2, CPython 3.11, google-crc32c 1.9.0, crc32c 2.9; ns per call):

===========  =================  =======================
size         ``crc32c.crc32c``  ``google_crc32c.value``
===========  =================  =======================
8 B          175 ns             179 ns
100 B        179 ns (0.56 GB/s) 181 ns (0.55 GB/s)
3,073 B      370 ns (8.3 GB/s)  375 ns (8.2 GB/s)
100 KiB      5.2 us (19.8 GB/s) 5.1 us (20.0 GB/s)
4 MiB        198 us (21.2 GB/s) 203 us (20.6 GB/s)
===========  =================  =======================

Their speed is the same; ``google_crc32c`` only refuses writable buffers (``bytearray``,
a ``memoryview`` of one), which the wrappers below copy, and which the readers' hot paths
never pass (they checksum ``bytes`` through :data:`crc32c_bytes`, the C function itself).

Many records inside one buffer (a framer's segment mode) are checksummed in place by
:func:`crc32c_many`, without slicing each payload into its own ``bytes``, where that is
faster. ``google_crc32c``'s binding takes only ``bytes``, but its wheels bundle the C
library, whose ``crc32c_value(pointer, length)`` ctypes can call on a pointer into the
buffer. Measured per record on a 2-core x86-64 VM (CPython 3.11; ns):

===========  ====================  ==================  ====================
payload      bytes slice + google  ctypes, google lib  ``crc32c`` on a view
===========  ====================  ==================  ====================
100 B        144                   310                 160
3,072 B      338                   448                 286
16 KiB       1,053                 952                 912
100 KiB      6,665                 4,269               4,062
===========  ====================  ==================  ====================

A ctypes call costs about 200 ns more than the binding, more than copying a payload under
16 KiB does, so :func:`crc32c_many` copies payloads below :data:`COPY_BELOW` into
short-lived ``bytes`` and reads longer ones in place. With the optional ``crc32c`` package
(``pip install asyncreader[fast-crc]``, LGPL-2.1, so not a core dependency) every payload
is read in place, through a ``memoryview``, at the binding's full speed. Without either C
library found, every payload is copied.
"""

from __future__ import annotations

import ctypes
import glob
import os
from typing import TYPE_CHECKING, Any, Final

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "COPY_BELOW",
    "IMPLEMENTATION",
    "IN_PLACE",
    "crc32c",
    "crc32c_bytes",
    "crc32c_at",
    "crc32c_many",
    "crc32c_strided",
    "extend",
    "mask",
    "masked_crc32c",
    "unmask",
]

#: Payloads shorter than this are copied to ``bytes`` for their checksum when only
#: ``google_crc32c`` is available: the copy costs less than a ctypes call (table above).
COPY_BELOW: Final = 16 << 10

_MASK_DELTA: Final = 0xA282EAD8
_U32: Final = 0xFFFFFFFF

crc32c: Callable[[bytes | bytearray | memoryview], int]
#: CRC-32C of a ``bytes`` object only: the C function itself, for per-record hot loops.
crc32c_bytes: Callable[[bytes], int]
_extend: Callable[[int, bytes | bytearray | memoryview], int]

try:  # an optional binding of the same speed that also takes writable buffers
    import crc32c as _crc32c_mod

    def _extend_fast(crc: int, data: bytes | bytearray | memoryview) -> int:
        return int(_crc32c_mod.crc32c(data, crc))

    # The C function itself is the hot-path callable: no Python frame per record.
    crc32c = _crc32c_mod.crc32c
    crc32c_bytes = _crc32c_mod.crc32c
    _extend = _extend_fast
    #: Which library computes the checksums.
    IMPLEMENTATION: str = "crc32c"
    _buffer_crc: Callable[[Any], int] | None = _crc32c_mod.crc32c
except ImportError:  # the usual case: only the google-crc32c dependency is installed
    import google_crc32c as _google

    def _crc_google(data: bytes | bytearray | memoryview) -> int:
        # google_crc32c only takes read-only bytes.
        if not isinstance(data, bytes):
            data = bytes(data)
        return int(_google.value(data))

    def _extend_google(crc: int, data: bytes | bytearray | memoryview) -> int:
        if not isinstance(data, bytes):
            data = bytes(data)
        return int(_google.extend(crc, data))

    crc32c = _crc_google
    # No wrapper frame for bytes: about 100 ns less per call, most of a small record's CRC.
    crc32c_bytes = _google.value
    _extend = _extend_google
    IMPLEMENTATION = "google_crc32c"
    _buffer_crc = None


def _load_google_library() -> Callable[[int, int], int] | None:
    """Return ``crc32c_value(address, length)`` of the C library bundled in google-crc32c's
    wheel, or ``None`` when it is not found (a source build, an unusual platform)."""
    try:
        import google_crc32c
    except ImportError:  # pragma: no cover - it is a dependency
        return None
    package = os.path.dirname(google_crc32c.__file__)
    # Where auditwheel (Linux), delocate (macOS) and delvewheel (Windows) put it.
    patterns = (
        package + ".libs/*crc32c*",
        os.path.join(package, ".dylibs", "*crc32c*"),
        os.path.join(os.path.dirname(package), "google_crc32c.libs", "*crc32c*.dll"),
    )
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            try:
                function = ctypes.CDLL(path).crc32c_value
            except (OSError, AttributeError):
                continue
            function.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
            function.restype = ctypes.c_uint32
            if function(ctypes.c_char_p(b"123456789"), 9) != 0xE3069283:  # pragma: no cover
                continue
            return function
    return None


_address_crc: Callable[[int, int], int] | None = (
    None if _buffer_crc is not None else _load_google_library()
)
#: How :func:`crc32c_many` reads payloads: ``"view"`` (all in place, the ``crc32c``
#: package), ``"ctypes"`` (in place from :data:`COPY_BELOW` bytes on) or ``"copy"``.
IN_PLACE: str = "view" if _buffer_crc is not None else "ctypes" if _address_crc else "copy"


def crc32c_many(buf: bytes, starts: Any, lengths: Any, *, how: str | None = None) -> Any:
    """Return the CRC-32C of each ``buf[starts[i] : starts[i] + lengths[i]]``.

    Args:
        buf: The buffer the payloads lie in.
        starts: Where each payload starts (a 1-D integer array).
        lengths: How long each payload is (a 1-D integer array).
        how: ``"view"``, ``"ctypes"`` or ``"copy"`` to force a method (tests compare
            them); by default :data:`IN_PLACE`.

    Returns:
        A 1-D ``uint64`` array of the unmasked checksums.
    """
    how = how or IN_PLACE
    starts = np.asarray(starts, np.int64)
    lengths = np.asarray(lengths, np.int64)
    count = len(starts)
    values: Iterator[int]
    # map() over C callables: the per-payload loop runs in C, with no bytecode per record.
    if how == "ctypes" and count and int(lengths.max()) >= COPY_BELOW:
        assert _address_crc is not None
        if int(starts.min()) < 0 or int((starts + lengths).max()) > len(buf):
            # C reads the memory unchecked: never past the buffer.
            raise ValueError("crc32c_many: a payload lies outside the buffer")
        base = _address(buf)
        if int(lengths.min()) >= COPY_BELOW:
            values = map(_address_crc, (starts + base).tolist(), lengths.tolist())
        else:
            address_crc = _address_crc
            small = crc32c_bytes if type(buf) is bytes else crc32c  # a view's slices copy
            values = iter(
                [
                    address_crc(base + s, n) if n >= COPY_BELOW else small(buf[s : s + n])
                    for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
                ]
            )
    else:
        source: Any = memoryview(buf) if how == "view" else buf
        function: Any = (
            _buffer_crc if how == "view" else crc32c_bytes if type(buf) is bytes else crc32c
        )
        slices = map(slice, starts.tolist(), (starts + lengths).tolist())
        values = map(function, map(source.__getitem__, slices))
    return np.fromiter(values, dtype=np.uint64, count=count)


def crc32c_at(buf: bytes, start: int, length: int) -> int:
    """Return the CRC-32C of ``buf[start : start + length]``, read in place where
    :func:`crc32c_many` would (for a few records, where numpy's setup costs more)."""
    if _buffer_crc is not None:
        return int(_buffer_crc(memoryview(buf)[start : start + length]))
    if length >= COPY_BELOW and _address_crc is not None:
        if start < 0 or start + length > len(buf):
            raise ValueError("crc32c_at: the payload lies outside the buffer")
        return _address_crc(_address(buf) + start, length)
    return crc32c(buf[start : start + length])


def crc32c_strided(
    buf: bytes, offset: int, count: int, length: int, stride: int, *, how: str | None = None
) -> Any:
    """Return the CRC-32C of ``count`` payloads of ``length`` bytes, ``stride`` apart.

    The payloads are ``buf[offset + i * stride :][:length]``. Like :func:`crc32c_many`, for
    a run of records of one length; a copy, when one is made, is one strided numpy pass.
    """
    how = how or IN_PLACE
    if how == "copy" or (how == "ctypes" and length < COPY_BELOW):
        if not count:
            return np.empty(0, np.uint64)
        # Short-lived bytes sliced in C, as list mode slices its payloads.
        pieces = (
            np.ndarray(
                (count,),
                dtype=np.dtype((np.void, length)),
                buffer=buf,
                offset=offset,
                strides=(stride,),
            ).tolist()
            if length
            else [b""] * count
        )
        return np.fromiter(map(crc32c_bytes, pieces), dtype=np.uint64, count=count)
    starts = np.arange(offset, offset + count * stride, stride, dtype=np.int64)
    return crc32c_many(buf, starts, np.full(count, length, np.int64), how=how)


def _address(buf: bytes) -> int:
    """The address of a buffer's storage: ctypes passes ``bytes`` without copying; a
    read-only ``memoryview`` (a pooled read block) is located through numpy."""
    if type(buf) is bytes:
        return ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value or 0
    address: int = np.frombuffer(buf, np.uint8).ctypes.data
    return address


def extend(crc: int, data: bytes | bytearray | memoryview) -> int:
    """Return the CRC-32C of the concatenation of the data behind ``crc`` and ``data``.

    Args:
        crc: The CRC-32C of the preceding bytes (0 for none).
        data: The bytes that follow.

    Returns:
        The unmasked CRC-32C of all the bytes.
    """
    return _extend(crc, data)


def mask(crc: int) -> int:
    """Return TensorFlow's masked form of an unmasked CRC-32C value.

    Args:
        crc: A 32-bit CRC.

    Returns:
        ``rotr(crc, 15) + 0xA282EAD8`` modulo 2**32.
    """
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32


def unmask(masked: int) -> int:
    """Invert :func:`mask`.

    Args:
        masked: A masked 32-bit CRC as stored in a TFRecord file.

    Returns:
        The plain CRC-32C value.
    """
    rot = (masked - _MASK_DELTA) & _U32
    return ((rot >> 17) | (rot << 15)) & _U32


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """Return the masked CRC-32C of ``data``, as TFRecord headers and footers store it.

    Args:
        data: The bytes to checksum.

    Returns:
        The masked 32-bit checksum.
    """
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32
