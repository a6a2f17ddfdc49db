"""``decode_csv``: TensorFlow's CSV record decoder, vectorised over a batch of lines.

Two paths give identical results and identical errors:

* The *fast path* handles the common batch: no quote characters (with ``use_quote_delim``),
  no CR/LF and no empty records, and the same number of fields in every record. A batch
  with quoted fields (but no LF inside a record) is first checked against TensorFlow's
  grammar by one regular expression, then split by Arrow's CSV reader with quoting, or
  unquoted by whole-buffer operations and split, and converted like the others. When
  pyarrow is installed, Arrow's CSV reader parses the joined batch in C++ with the GIL
  released (so map stages on threads run in parallel), provided every numeric field holds
  only decimal digits, ``.``, ``e``/``E`` and signs: within that alphabet Arrow accepts a
  subset of what TensorFlow accepts and gives the same values (float32 is rounded once
  from the decimal, like ``strtof``), and what it refuses goes on below. An all-numeric
  batch is checked with one pass over its bytes; with a string column, numeric columns
  are read as text, checked by Arrow and cast. Otherwise the batch is split once with
  ``bytes.split`` and each column is converted as a whole (``int`` / ``float`` over the
  column after a one-pass check of its alphabet, float32 halfway cases re-rounded
  exactly). A column whose text needs the full grammar (hex floats, ``inf``) is converted
  field by field.
* The *exact path* splits each record with TensorFlow's field scanner and converts field by
  field, raising the first error in record order. Whenever the fast path meets anything it
  does not handle, including any invalid value, the whole batch goes to the exact path, so
  errors always come from one place.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import InvalidArgumentError
from .._records.batch import RecordBatch
from .dtypes import STRING, resolve_dtype, tf_name
from .numbers import parse_float, parse_int, round_float32_ties
from .policy import check_keys, check_on_error, check_skip_shape, decode_guarded
from .strings import flatten_strings, to_bytes

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._error_policy import OnError
    from .policy import DecodeErrors

__all__ = ["decode_csv"]

_OUT_TYPES = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
    STRING: "string",
}
_QUOTE = 0x22
_CR = 0x0D
_LF = 0x0A
# Characters the whole-column converters may see; anything else takes the per-field route.
_INT_ALPHABET = b"0123456789+- \t\x0b\x0c"
_FLOAT_ALPHABET = b"0123456789.eE+- \t\x0b\x0c"
# The bytes numeric fields may hold for Arrow to parse them: within these, Arrow's parsers
# accept only texts TensorFlow accepts and give the same values (whitespace, hex, inf and
# nan, where the two differ or might, are left out).
_ARROW_NUMBER_ALPHABET = b"0123456789.eE+-"
_ARROW_NUMBER_PATTERN = "^[0-9.eE+-]*$"
# Bytes that may stand in for others while a quoted batch is split (any not in the batch).
_SPARE_BYTES = tuple(bytes((code,)) for code in range(256) if code not in (_QUOTE, _LF))
_ARROW_TYPES = {
    np.dtype(np.float32): "float32",
    np.dtype(np.float64): "float64",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
    STRING: "binary",
}


class _FieldError(Exception):
    """A record could not be split; carries TensorFlow's message."""


@dataclass(frozen=True, slots=True)
class _Column:
    dtype: np.dtype[np.generic]
    default: object  # None when the field is required

    @property
    def name(self) -> str:
        return _OUT_TYPES[self.dtype]


def decode_csv(
    records: object,
    record_defaults: Sequence[object],
    field_delim: str | bytes = ",",
    use_quote_delim: bool = True,
    na_value: str | bytes = "",
    select_cols: Sequence[int] | None = None,
    *,
    on_error: OnError | DecodeErrors = None,
    keys: object = None,
) -> list[np.ndarray]:
    """Convert CSV records to one numpy array per column, as ``tf.io.decode_csv`` does.

    ``records`` is one line (bytes or str; outputs are 0-d) or a batch: a list / tuple
    (possibly nested) or numpy array of lines; every output has the batch's shape. Each
    entry of ``record_defaults`` fixes an output's dtype and what a missing field becomes:

    * a scalar or one-element list / array: the value used when the field is empty or
      equals ``na_value``. Python ``float`` means float32, ``int`` int32 (int64 when it
      does not fit), ``str`` / ``bytes`` string; numpy scalars and arrays keep their dtype.
    * an empty list (float32) or empty array (its dtype), or a dtype itself
      (``np.int64``): the field is required.

    Output dtypes are float32, float64, int32, int64 and object arrays of ``bytes``.

    Fields are split the TensorFlow way: a field starting with ``"`` (when
    ``use_quote_delim``) runs to a ``"`` followed by the delimiter or the end, with ``""``
    standing for one quote; CR and LF at the start of a field are skipped; a trailing
    delimiter adds an empty last field; an empty record has no fields. Integers allow
    surrounding whitespace and a sign; floats follow C's ``strtof`` / ``strtod`` (hex, ``inf``,
    ``nan``). ``select_cols`` keeps only the listed columns and stops scanning a record after
    the last of them.

    With pyarrow installed (``asyncreader[arrow]``), batches whose numeric fields are plain
    decimals are parsed by Arrow's CSV reader without holding the GIL, so decoding in
    several worker threads (:func:`~asyncreader.map`) runs in parallel; results and errors
    are the same either way. Batches with quoted fields are decoded whole too, once one
    pass has checked them against TensorFlow's quoting rules; a batch with a record that
    holds a LF, or that TensorFlow rejects, is decoded record by record.

    Args:
        records: The line(s) to decode.
        record_defaults: One entry per output, as above.
        field_delim: The one-byte field delimiter.
        use_quote_delim: Whether ``"`` quotes fields; if False it is an ordinary character.
        na_value: A field equal to this is treated as missing.
        select_cols: Increasing column indices to keep, one per ``record_defaults`` entry.
        on_error: ``None`` / ``"raise"`` (TensorFlow's behaviour) raises the first bad
            record's error; a :class:`~asyncreader.DecodeErrors` with a skipping policy drops
            bad records instead (``records`` must then be a 1-D batch) and notes them as
            dead letters; ``errors.kept`` gives the positions of the rows returned.
        keys: The batch's reader keys, one per record: errors and dead letters then name
            the file and record key instead of a position in the batch.

    Returns:
        One array per ``record_defaults`` entry, each shaped like ``records`` (with bad
        records skipped: one row per kept record).

    Raises:
        InvalidArgumentError: (always with TensorFlow's text; ``record`` is the flat record
            index) ``select_cols`` is not strictly increasing, contains negative values or has
            a different length from ``record_defaults``; ``field_delim`` is not one byte; a
            default has rank > 1 or more than one value, or a dtype other than the five
            above; a record has a badly quoted field (``Quote inside a string has to be
            escaped by another quote``, ``Quoted field has to end with quote followed by
            delim or end``) or a quote / CR / LF inside an unquoted field (``Unquoted fields
            cannot have quotes/CRLFs inside``); a record has the wrong number of fields
            (``Expect <n> fields but have <m> in record <i>``); a required field is missing
            (``Field <f> is required but missing in record <i>!``); a value does not parse
            (``Field <f> in record <i> is not a valid <type>: <text>``); skipping was asked
            for without a DecodeErrors, or for records that are not a 1-D batch; the policy's
            limits were exceeded (the error of the record that exceeded them, with a note).
    """
    errors = check_on_error(on_error)
    select = _check_select_cols(select_cols, record_defaults)
    delim = to_bytes(field_delim)
    if len(delim) != 1:
        raise InvalidArgumentError("field_delim should be only 1 char")
    na = to_bytes(na_value)
    columns = [_column(i, default) for i, default in enumerate(record_defaults)]
    if isinstance(records, RecordBatch):
        return _decode_record_batch(
            records, columns, delim, use_quote_delim, na, select, errors, keys
        )
    items, shape = flatten_strings(records)
    key_list = check_keys(keys, len(items))
    skipping = check_skip_shape(errors, shape)

    def decode(span: range) -> list[np.ndarray]:
        part = items if len(span) == len(items) else items[span.start : span.stop]
        if not part:
            return [np.empty(0, dtype=column.dtype) for column in columns]
        joined = b"\n".join(part)
        outputs = _fast_path(joined, len(part), columns, delim, use_quote_delim, na, select)
        if outputs is None:
            outputs = _exact_path(part, columns, delim[0], use_quote_delim, na, select, span.start)
        return outputs

    outputs = decode_guarded(len(items), decode, _concatenate, errors, key_list)
    if skipping:
        return outputs
    return [output.reshape(shape) for output in outputs]


def _decode_record_batch(
    batch: RecordBatch,
    columns: list[_Column],
    delim: bytes,
    use_quote: bool,
    na: bytes,
    select: tuple[int, ...] | None,
    errors: DecodeErrors | None,
    keys: object,
) -> list[np.ndarray]:
    """``decode_csv`` of a reader's batch: the lines are joined straight from the block they
    were read into (no object per line) and errors name the work item and record key."""
    count = len(batch)
    given = check_keys(keys, count)
    key_seq: Sequence[bytes] = batch.key_view() if given is None else given
    check_skip_shape(errors, (count,))

    def decode(span: range) -> list[np.ndarray]:
        part = batch if len(span) == count else batch[span.start : span.stop]
        if not len(part):
            return [np.empty(0, dtype=column.dtype) for column in columns]
        joined = part.join(b"\n")
        outputs = _fast_path(joined, len(part), columns, delim, use_quote, na, select)
        if outputs is None:
            lines = part.tolist()
            outputs = _exact_path(lines, columns, delim[0], use_quote, na, select, span.start)
        return outputs

    return decode_guarded(count, decode, _concatenate, errors, key_seq)


def _concatenate(pieces: list[list[np.ndarray]]) -> list[np.ndarray]:
    return [np.concatenate(column) for column in zip(*pieces, strict=True)]


def _check_select_cols(
    select_cols: Sequence[int] | None, record_defaults: Sequence[object]
) -> tuple[int, ...] | None:
    if select_cols is None:
        return None
    select = tuple(int(col) for col in select_cols)
    if any(select[i] >= select[i + 1] for i in range(len(select) - 1)):
        raise InvalidArgumentError("select_cols is not strictly increasing.")
    if select and select[0] < 0:
        raise InvalidArgumentError("select_cols contains negative values.")
    if len(select) != len(record_defaults):
        raise InvalidArgumentError("Length of select_cols and record_defaults do not match.")
    # TensorFlow reads an empty selection as "all columns".
    return select or None


def _column(index: int, default: object) -> _Column:
    if isinstance(default, (np.dtype, type)):
        return _Column(_out_dtype(resolve_dtype(default)), None)
    if isinstance(default, (list, tuple)):
        if any(isinstance(item, (list, tuple, np.ndarray)) for item in default):
            raise InvalidArgumentError("Each record default should be at most rank 1")
        if len(default) > 1:
            raise InvalidArgumentError(
                f"There should only be 1 default per field but field {index} has {len(default)}"
            )
        if not default:
            return _Column(np.dtype(np.float32), None)
        default = default[0]
    elif isinstance(default, np.ndarray):
        if default.ndim > 1:
            raise InvalidArgumentError("Each record default should be at most rank 1")
        if default.size > 1:
            raise InvalidArgumentError(
                f"There should only be 1 default per field but field {index} has {default.size}"
            )
        dtype = _out_dtype(default.dtype)
        if default.size == 0:
            return _Column(dtype, None)
        return _Column(dtype, _cast_default(default.reshape(-1)[0], dtype))
    dtype = _infer_dtype(default)
    return _Column(dtype, _cast_default(default, dtype))


def _infer_dtype(value: object) -> np.dtype[np.generic]:
    if isinstance(value, (bytes, str, np.bytes_, np.str_)):
        return STRING
    if isinstance(value, np.generic):  # before the Python types: np.float64 is a float
        return _out_dtype(value.dtype)
    if isinstance(value, (bool, np.bool_)):
        return _out_dtype(np.dtype(np.bool_))
    if isinstance(value, int):
        return np.dtype(np.int32 if -(2**31) <= value < 2**31 else np.int64)
    if isinstance(value, float):
        return np.dtype(np.float32)
    raise InvalidArgumentError(f"cannot use {value!r} as a record default")


def _out_dtype(dtype: np.dtype[np.generic]) -> np.dtype[np.generic]:
    if dtype.kind in "SUO":
        return STRING
    dtype = dtype.newbyteorder("=")
    if dtype not in _OUT_TYPES:
        raise InvalidArgumentError(
            f"Value for attr 'OUT_TYPE' of {tf_name(dtype)} is not in the list of allowed "
            "values: float, double, int32, int64, string"
        )
    return dtype


def _cast_default(value: object, dtype: np.dtype[np.generic]) -> object:
    if dtype == STRING:
        return to_bytes(value)
    return dtype.type(value)


# --- exact path ------------------------------------------------------------------------


def _split_record(
    record: bytes, delim: int, use_quote: bool, select: tuple[int, ...] | None
) -> list[bytes]:
    """TensorFlow's field scanner (``ExtractFields``), with ``bytes.find`` for speed."""
    fields: list[bytes] = []
    size = len(record)
    if size == 0:
        return fields
    delim_bytes = bytes((delim,))
    index = 0
    parsed = 0
    selected = 0
    while index < size:
        char = record[index]
        if char in (_LF, _CR):
            index += 1
            continue
        include = select is None or select[selected] == parsed
        if use_quote and char == _QUOTE:
            index += 1
            parts: list[bytes] = []
            while True:
                quote = record.find(b'"', index)
                if quote == -1 or quote >= size - 1:
                    # No quote pair before the last byte: the field must end at the end.
                    if quote != size - 1:
                        raise _FieldError(
                            "Quoted field has to end with quote followed by delim or end"
                        )
                    parts.append(record[index:quote])
                    index = size + 1
                    break
                parts.append(record[index:quote])
                follower = record[quote + 1]
                if follower == delim:
                    index = quote + 2
                    break
                if follower != _QUOTE:
                    raise _FieldError("Quote inside a string has to be escaped by another quote")
                parts.append(b'"')
                index = quote + 2
                if index >= size:
                    raise _FieldError("Quoted field has to end with quote followed by delim or end")
            field = b"".join(parts)
        else:
            end = record.find(delim_bytes, index)
            if end == -1:
                end = size
            field = record[index:end]
            if (use_quote and b'"' in field) or b"\n" in field or b"\r" in field:
                raise _FieldError("Unquoted fields cannot have quotes/CRLFs inside")
            index = end + 1
        parsed += 1
        if include:
            fields.append(field)
            selected += 1
            if select is not None and selected == len(select):
                return fields
    include = select is None or select[selected] == parsed
    if include and record[-1] == delim:
        fields.append(b"")
    return fields


def _exact_path(
    items: Sequence[bytes],
    columns: list[_Column],
    delim: int,
    use_quote: bool,
    na: bytes,
    select: tuple[int, ...] | None,
    base: int = 0,
) -> list[np.ndarray]:
    """Split and convert record by record; ``base`` is the position of ``items[0]`` in the
    caller's batch, for messages and ``record``."""
    count = len(columns)
    values: list[list[object]] = [[] for _ in columns]
    for i, record in enumerate(items, base):
        try:
            fields = _split_record(record, delim, use_quote, select)
        except _FieldError as exc:
            raise InvalidArgumentError(str(exc), record=i) from None
        if len(fields) != count:
            raise InvalidArgumentError(
                f"Expect {count} fields but have {len(fields)} in record {i}", record=i
            )
        for f, (field, column) in enumerate(zip(fields, columns, strict=True)):
            values[f].append(_convert(field, column, f, i, na))
    return [
        _to_array(column_values, column.dtype)
        for column_values, column in zip(values, columns, strict=True)
    ]


def _convert(field: bytes, column: _Column, f: int, i: int, na: bytes) -> object:
    if not field or field == na:
        if column.default is None:
            raise InvalidArgumentError(
                f"Field {f} is required but missing in record {i}!", record=i
            )
        return column.default
    value = _parse(field, column.dtype)
    if value is None:
        text = field.decode("utf-8", "backslashreplace")
        raise InvalidArgumentError(
            f"Field {f} in record {i} is not a valid {column.name}: {text}", record=i
        )
    return value


def _parse(field: bytes, dtype: np.dtype[np.generic]) -> object:
    kind = dtype.kind
    if kind == "O":
        return field
    if kind == "i":
        return parse_int(field, dtype.itemsize * 8)
    return parse_float(field, dtype.itemsize == 4)


def _to_array(values: list[object], dtype: np.dtype[np.generic]) -> np.ndarray:
    if dtype == STRING:
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array
    with np.errstate(over="ignore"):
        return np.array(values, dtype=dtype)


# --- fast path -------------------------------------------------------------------------


def _fast_path(
    joined: bytes,
    count: int,
    columns: list[_Column],
    delim: bytes,
    use_quote: bool,
    na: bytes,
    select: tuple[int, ...] | None,
) -> list[np.ndarray] | None:
    """Decode ``count`` records joined by newlines without per-record work, or return
    None to use the exact path."""
    if not columns or delim in b'"\r\n':
        return None
    if (
        joined.count(b"\n") != count - 1
        or not joined
        or joined[:1] == b"\n"
        or joined[-1:] == b"\n"
        or b"\n\n" in joined
    ):
        return None  # LF inside a record, or an empty record
    if use_quote and b'"' in joined:
        return _quoted_path(joined, count, columns, delim, na, select)
    if b"\r" in joined:
        return None
    parsed = _arrow_path(joined, columns, delim, na, select, quoted=False)
    if parsed is not None:
        return parsed
    width = _uniform_width(joined, delim, count)
    if width is None:
        return None
    wanted = select if select is not None else tuple(range(len(columns)))
    if (select is None and width != len(columns)) or wanted[-1] >= width:
        return None
    flat = joined.replace(b"\n", delim).split(delim)
    outputs: list[np.ndarray] = []
    for column, source in zip(columns, wanted, strict=True):
        output = _convert_column(flat[source::width], column, na)
        if output is None:
            return None
        outputs.append(output)
    return outputs


def _quoted_path(
    joined: bytes,
    count: int,
    columns: list[_Column],
    delim: bytes,
    na: bytes,
    select: tuple[int, ...] | None,
) -> list[np.ndarray] | None:
    """Decode ``count`` records holding quote characters (no LF inside a record, no empty
    record), or return None to use the exact path.

    One regular expression checks that every record follows TensorFlow's grammar to its
    end; a batch that passes has no record TensorFlow would reject for its quoting, and
    splitting it as CSV (Arrow's reader, else ``_quoted_columns``) gives the same fields as
    TensorFlow's scanner, a quoted field becoming its content. With ``select_cols`` the
    columns after the last selected one are checked too, so a batch whose unselected tail
    is malformed goes to the exact path (which does not look there).
    """
    if _quoted_grammar(delim).fullmatch(joined) is None:
        return None
    parsed = _arrow_path(joined, columns, delim, na, select, quoted=True)
    if parsed is not None:
        return parsed
    fields = _quoted_columns(joined, count, delim, len(columns), select)
    if fields is None:
        return None
    outputs: list[np.ndarray] = []
    for column, values in zip(columns, fields, strict=True):
        output = _convert_column(values, column, na)
        if output is None:
            return None
        outputs.append(output)
    return outputs


@functools.lru_cache(maxsize=16)
def _quoted_grammar(delim: bytes) -> re.Pattern[bytes]:
    """Records separated by LF, each a sequence of fields TensorFlow's scanner accepts:
    unquoted (no quote, CR, LF or delimiter) or quoted (``""`` for a quote, no LF) and
    followed by the delimiter or the end of the record. Possessive quantifiers: the grammar
    has one parse, and without backtracking the match runs in linear time."""
    other = re.escape(delim)
    field = rb'(?:"[^"\n]*+(?:""[^"\n]*+)*+"|[^"\n\r' + other + rb"]*+)"
    record = field + rb"(?:" + other + field + rb")*+"
    return re.compile(record + rb"(?:\n" + record + rb")*+")


def _quoted_columns(
    joined: bytes, count: int, delim: bytes, outputs: int, select: tuple[int, ...] | None
) -> list[list[bytes]] | None:
    """The wanted columns' fields of ``count`` records ``_quoted_grammar`` accepted, or
    None when the records differ in width or are too narrow (or hold all byte values).

    Once the grammar holds, the parts between quote characters alternate: odd parts are
    the text of quoted fields, and an empty even part between two of them stands for an
    escaped quote (``""``; a closing quote is followed by the delimiter, LF or the end).
    So a few whole-buffer operations unquote the batch, with the delimiters inside quoted
    fields swapped for a byte the batch does not hold, and it is split as the fast path
    splits unquoted batches (about twice as fast as the ``csv`` module, which also builds
    a list per record).
    """
    absent = (byte for byte in _SPARE_BYTES if byte != delim and byte not in joined)
    spare = list(itertools.islice(absent, 2))
    if len(spare) < 2:
        return None
    joiner, stand_in = spare
    parts = joined.split(b'"')
    quoted_text = joiner.join(parts[1::2])
    hidden = delim in quoted_text
    if hidden:
        parts[1::2] = quoted_text.replace(delim, stand_in).split(joiner)
    parts[2:-1:2] = [part or b'"' for part in parts[2:-1:2]]
    text = b"".join(parts)
    width = _uniform_width(text, delim, count)
    wanted = select if select is not None else range(outputs)
    if width is None or (select is None and width != outputs) or wanted[-1] >= width:
        return None
    flat = text.replace(b"\n", delim).split(delim)
    columns = [flat[source::width] for source in wanted]
    if hidden:
        columns = [
            [field.replace(stand_in, delim) for field in values]
            if stand_in in b"".join(values)
            else values
            for values in columns
        ]
    return columns


@functools.cache
def _arrow_modules() -> tuple[Any, Any, Any] | None:
    """``(pyarrow, pyarrow.csv, pyarrow.compute)``, or None when pyarrow is not installed."""
    try:
        import pyarrow
        import pyarrow.compute
        import pyarrow.csv
    except ImportError:
        return None
    return pyarrow, pyarrow.csv, pyarrow.compute


@dataclass(frozen=True, slots=True)
class _ArrowPlan:
    """How one decode_csv signature goes through Arrow."""

    read: Any
    parse: Any
    convert: Any
    # The bytes an all-numeric batch may hold; None with a string column, whose fields
    # may hold anything: then the numeric columns are read as text, checked and cast.
    alphabet: bytes | None
    casts: tuple[Any, ...]  # per output: the type to cast the text to, or None


@functools.lru_cache(maxsize=64)
def _arrow_plan(
    delim: bytes,
    na: bytes,
    dtypes: tuple[np.dtype[np.generic], ...],
    select: tuple[int, ...] | None,
    quoted: bool,
) -> _ArrowPlan | None:
    """The Arrow options for one decode_csv signature, or None when it cannot use Arrow;
    ``quoted`` for batches holding quote characters (checked against TensorFlow's grammar
    before they come here)."""
    modules = _arrow_modules()
    if modules is None or delim[0] >= 0x80 or delim in _ARROW_NUMBER_ALPHABET:
        return None
    try:
        na_text = na.decode("ascii")
    except UnicodeDecodeError:
        return None  # Arrow matches null values as text; keep odd bytes on the other paths
    pa, pa_csv, _ = modules
    numeric_only = STRING not in dtypes
    wanted = select if select is not None else range(len(dtypes))
    names = [f"f{source}" for source in wanted]
    targets = [getattr(pa, _ARROW_TYPES[dtype])() for dtype in dtypes]
    read_as = [
        target if numeric_only or dtype == STRING else pa.string()
        for target, dtype in zip(targets, dtypes, strict=True)
    ]
    read = pa_csv.ReadOptions(use_threads=False, autogenerate_column_names=True)
    if quoted:
        # The batch follows TensorFlow's grammar, where Arrow's quoting reads the same
        # fields. Quoted values may hold CR: newlines_in_values keeps Arrow from cutting a
        # large batch into blocks there.
        parse = pa_csv.ParseOptions(
            delimiter=delim.decode("ascii"),
            quote_char='"',
            double_quote=True,
            escape_char=False,
            newlines_in_values=True,
        )
    else:
        # No quoting: batches without quote characters, or where quotes are ordinary.
        parse = pa_csv.ParseOptions(delimiter=delim.decode("ascii"), quote_char=False)
    convert = pa_csv.ConvertOptions(
        column_types=dict(zip(names, read_as, strict=True)),
        null_values=sorted({"", na_text}),
        strings_can_be_null=True,
        # Without select_cols every column is wanted and the width is checked instead.
        include_columns=names if select is not None else None,
        # TensorFlow compares the content of a quoted field with na_value, and a quoted
        # empty field is empty: both take the default (Arrow's default, made explicit).
        quoted_strings_can_be_null=True,
    )
    if numeric_only:
        alphabet = _ARROW_NUMBER_ALPHABET + b"\n" + delim + (b'"' if quoted else b"")
        return _ArrowPlan(read, parse, convert, alphabet, ())
    casts = tuple(
        None if dtype == STRING else target for target, dtype in zip(targets, dtypes, strict=True)
    )
    return _ArrowPlan(read, parse, convert, None, casts)


def _arrow_path(
    joined: bytes,
    columns: list[_Column],
    delim: bytes,
    na: bytes,
    select: tuple[int, ...] | None,
    *,
    quoted: bool,
) -> list[np.ndarray] | None:
    """Decode the joined batch with Arrow's CSV reader, or return None to go on with the
    other paths: pyarrow missing, text Arrow might read differently, any Arrow error, a
    width other than the expected one, or a missing required field."""
    plan = _arrow_plan(delim, na, tuple(column.dtype for column in columns), select, quoted)
    if plan is None or (plan.alphabet is not None and joined.translate(None, plan.alphabet)):
        return None
    pa, pa_csv, pc = _arrow_modules()  # type: ignore[misc]  # not None: a plan exists
    # The text goes to Arrow in a buffer Arrow owns, not one wrapping a Python object:
    # Arrow's I/O threads drop their references to it after read_all() returns, and
    # dropping a Python object needs the GIL, which a thread cannot take while the
    # interpreter exits (the process then aborts in std::terminate). The copy costs what
    # adding the final newline to a bytes object did. That newline lets Arrow read a
    # one-line batch (it rejects a lone unended line).
    text = pa.allocate_buffer(len(joined) + 1)
    view = memoryview(text).cast("B")
    view[: len(joined)] = joined
    view[len(joined)] = _LF
    view.release()
    try:
        reader = pa_csv.open_csv(
            text,
            read_options=plan.read,
            parse_options=plan.parse,
            convert_options=plan.convert,
        )
        if select is None and len(reader.schema) != len(columns):
            return None
        data_columns = reader.read_all().columns
        for index, cast in enumerate(plan.casts):
            if cast is not None:
                text = data_columns[index]
                if not pc.all(pc.match_substring_regex(text, _ARROW_NUMBER_PATTERN)).as_py():
                    return None
                data_columns[index] = text.cast(cast)
    except (pa.ArrowException, ValueError):
        return None  # wrong widths, unparsable or out-of-range values: the exact rules decide
    outputs: list[np.ndarray] = []
    for column, data in zip(columns, data_columns, strict=True):
        if data.null_count:
            if column.default is None:
                return None
            data = data.fill_null(pa.scalar(column.default, type=data.type))
        array = data.to_numpy()
        if not array.flags.writeable:
            array = array.copy()  # Arrow's memory is read-only; callers own their arrays
        outputs.append(array)
    return outputs


def _uniform_width(joined: bytes, delim: bytes, count: int) -> int | None:
    """The number of fields per record if every record has the same, else None."""
    total = joined.count(delim)
    if total % count:
        return None
    if count > 1 and total:
        chars = np.frombuffer(joined, dtype=np.uint8)
        # Delimiters before each record boundary, by binary search (cheaper than a cumsum).
        delims = np.flatnonzero(chars == delim[0])
        boundaries = np.flatnonzero(chars == _LF)
        before = np.searchsorted(delims, boundaries)
        per_record = np.diff(before, prepend=0, append=total)
        if (per_record != per_record[0]).any():
            return None
    return total // count + 1


def _convert_column(values: list[bytes], column: _Column, na: bytes) -> np.ndarray | None:
    count = len(values)
    missing = np.zeros(count, dtype=bool)
    if b"" in values:
        missing = np.fromiter(map(len, values), dtype=np.intp, count=count) == 0
    if na and na in values:
        missing |= np.array(values, dtype=object) == na
    any_missing = bool(missing.any())
    if any_missing and column.default is None:
        return None
    dtype = column.dtype
    if dtype == STRING:
        output = np.empty(count, dtype=object)
        output[:] = values
    else:
        if any_missing:
            present = np.array(values, dtype=object)
            present[missing] = b"0"
            values = present.tolist()
        output_or_none = _convert_numbers(values, dtype)
        if output_or_none is None:
            return None
        output = output_or_none
    if any_missing:
        output[missing] = column.default
    return output


def _convert_numbers(values: list[bytes], dtype: np.dtype[np.generic]) -> np.ndarray | None:
    is_int = dtype.kind == "i"
    sample = b"".join(values)
    alphabet = _INT_ALPHABET if is_int else _FLOAT_ALPHABET
    if sample.translate(None, alphabet):
        return _convert_fieldwise(values, dtype)
    try:
        if is_int:
            numbers = np.fromiter(map(int, values), dtype=np.int64, count=len(values))
            if dtype.itemsize == 4:
                if (numbers < -(2**31)).any() or (numbers >= 2**31).any():
                    return None
                return numbers.astype(np.int32)
            return numbers
        doubles = np.fromiter(map(float, values), dtype=np.float64, count=len(values))
    except (ValueError, OverflowError):
        return _convert_fieldwise(values, dtype)
    if dtype.itemsize == 8:
        return doubles
    singles, halfway = round_float32_ties(doubles)
    for index in halfway.tolist():
        singles[index] = parse_float(values[index], True)
    return singles


def _convert_fieldwise(values: list[bytes], dtype: np.dtype[np.generic]) -> np.ndarray | None:
    parsed = [_parse(value, dtype) for value in values]
    if any(value is None for value in parsed):
        return None
    return _to_array(parsed, dtype)
