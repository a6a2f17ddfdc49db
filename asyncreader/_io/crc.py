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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["crc32c", "crc32c_bytes", "extend", "mask", "masked_crc32c", "unmask", "IMPLEMENTATION"]

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
