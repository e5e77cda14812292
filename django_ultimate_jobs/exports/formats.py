"""CSV and NDJSON parts: how each column type is written and read back.

**CSV** (RFC 4180: ``,``, ``"`` quoting, CRLF; UTF-8; the header in part 0
only, so ``cat part-*`` is one file). A spreadsheet takes a cell that starts
with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return for a formula
(``=HYPERLINK(...)`` opens a link, others run commands): such a text cell
is written with a leading apostrophe, which spreadsheets show as text. So
that this round-trips, a cell that starts with an apostrophe gets one too,
and reading strips exactly one leading apostrophe: ``'=1+2`` is read as
``=1+2``, ``''x`` as ``'x``. Numbers are never touched (``-5`` is a
number). In a ``string`` column an empty cell is the empty string and a
lone ``'`` is NULL; in every other column an empty cell is NULL.

**NDJSON** (one JSON object a line, keys in column order): integers,
numbers and booleans as JSON, decimals as strings (exact), times in ISO
8601, ``json`` columns as their value.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from django.utils.dateparse import parse_duration
from django.utils.duration import duration_iso_string

from .columns import Column

__all__ = [
    "ESCAPE",
    "FORMATS",
    "FORMULA_STARTS",
    "CellRefused",
    "decode_part",
    "encode_part",
    "neutralise",
    "restore",
]

FORMATS = ("csv", "ndjson")
FORMULA_STARTS = frozenset("=+-@\t\r")
"""What a spreadsheet reads a cell starting with as a formula."""
ESCAPE = "'"
_INTEGER = re.compile(r"-?[0-9]+")
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class CellRefused(ValueError):
    """A cell cannot be written (or read) as its column's type.

    ``reason`` says why without the value; ``column`` (index) and ``line``
    (from 1: the part's line being read, or the row being written) are
    filled in by the loops.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.column: int | None = None
        self.line: int | None = None


def neutralise(text: str) -> str:
    """``text`` as a CSV cell no spreadsheet runs (see the module docstring)."""
    if text and (text[0] in FORMULA_STARTS or text[0] == ESCAPE):
        return ESCAPE + text
    return text


def restore(text: str) -> str:
    """The text :func:`neutralise` was given."""
    return text[1:] if text.startswith(ESCAPE) else text


# -- writing: value -> (CSV text, JSON value) -------------------------------------


def _kind(value: Any) -> str:
    return type(value).__name__


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CellRefused(f"a {_kind(value)} in an integer column")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CellRefused(f"a {_kind(value)} in a number column")
    if not math.isfinite(value):
        raise CellRefused("a number that is not finite (NaN or infinity)")
    return float(value)


def _decimal(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, Decimal):
        raise CellRefused(f"a {_kind(value)} in a decimal column")
    if not value.is_finite():
        raise CellRefused("a decimal that is not finite (NaN or infinity)")
    return str(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise CellRefused(f"a {_kind(value)} in a boolean column")
    return value


def _typed(
    kind: type, name: str, to_text: Callable[[Any], str]
) -> Callable[[Any], str]:
    def write(value: Any) -> str:
        # A datetime is a date: a date column refuses one all the same.
        if not isinstance(value, kind) or (
            kind is date and isinstance(value, datetime)
        ):
            raise CellRefused(f"a {_kind(value)} in a {name} column")
        return to_text(value)

    return write


def _json_value(value: Any) -> Any:
    try:
        _ENCODER.encode(value)
    except (TypeError, ValueError) as error:
        raise CellRefused(
            f"a value JSON cannot hold ({type(error).__name__})"
        ) from None
    return value


_WRITE_JSON: dict[str, Callable[[Any], Any]] = {
    "integer": _integer,
    "number": _number,
    "decimal": _decimal,
    "boolean": _boolean,
    "string": _typed(str, "string", str),
    "datetime": _typed(datetime, "datetime", datetime.isoformat),
    "date": _typed(date, "date", date.isoformat),
    "time": _typed(time, "time", time.isoformat),
    "duration": _typed(timedelta, "duration", duration_iso_string),
    "uuid": _typed(UUID, "uuid", str),
    "json": _json_value,
}


def _csv_writer(kind: str) -> Callable[[Any], str]:
    to_json = _WRITE_JSON[kind]
    if kind == "string":
        return lambda v: ESCAPE if v is None else neutralise(to_json(v))
    if kind in ("integer", "decimal"):
        return lambda v: "" if v is None else str(to_json(v))
    if kind == "number":
        return lambda v: "" if v is None else repr(to_json(v))
    if kind == "boolean":
        return lambda v: "" if v is None else ("true" if to_json(v) else "false")
    if kind == "json":
        return lambda v: "" if v is None else neutralise(_ENCODER.encode(to_json(v)))
    return lambda v: "" if v is None else neutralise(to_json(v))


def _json_writer(kind: str) -> Callable[[Any], Any]:
    to_json = _WRITE_JSON[kind]
    return lambda v: None if v is None else to_json(v)


def encode_part(
    format: str,
    columns: Sequence[Column],
    rows: Iterable[Sequence[Any]],
    *,
    header: bool,
) -> bytes:
    """One part's bytes: ``rows`` (values in column order) in ``format``.

    Raises:
        CellRefused: a value the column's type cannot write (``column``
            set; the row is the caller's to name).
    """
    if format == "csv":
        writers = [_csv_writer(c.type) for c in columns]
        out = io.StringIO()
        sheet = csv.writer(out, lineterminator="\r\n")
        if header:
            sheet.writerow([neutralise(c.name) for c in columns])
        for n, row in enumerate(rows, 1):
            sheet.writerow(_cells(writers, row, n))
        return out.getvalue().encode("utf-8")
    writers = [_json_writer(c.type) for c in columns]
    names = [c.name for c in columns]
    lines = [
        _ENCODER.encode(dict(zip(names, _cells(writers, row, n), strict=True)))
        for n, row in enumerate(rows, 1)
    ]
    return ("\n".join(lines) + "\n").encode("utf-8") if lines else b""


def _cells(
    functions: Sequence[Callable[[Any], Any]], values: Sequence[Any], line: int
) -> list[Any]:
    """Each value through its column's function (a writer or a reader)."""
    try:
        return [apply(value) for apply, value in zip(functions, values, strict=True)]
    except CellRefused:
        # The slow path, on the refused line only: which column it was.
        for n, (apply, value) in enumerate(zip(functions, values, strict=True)):
            try:
                apply(value)
            except CellRefused as refused:
                refused.column = n
                raise _at(refused, line) from None
        raise


# -- reading: CSV text or JSON value -> the field's value ---------------------------


def _read_integer(value: Any) -> int:
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise CellRefused("not an integer")


def _read_number(value: Any) -> float:
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise CellRefused("not a finite number")
    return number


def _read_decimal(value: Any) -> Decimal:
    try:
        number = Decimal(value) if isinstance(value, str | int) else Decimal("NaN")
    except InvalidOperation:
        number = Decimal("NaN")
    if isinstance(value, bool) or not number.is_finite():
        raise CellRefused("not a finite decimal")
    return number


def _read_boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise CellRefused("not true or false")


def _parsed(name: str, parse: Callable[[str], Any]) -> Callable[[Any], Any]:
    def read(value: Any) -> Any:
        try:
            parsed = parse(value) if isinstance(value, str) else None
        except ValueError:
            parsed = None
        if parsed is None:
            raise CellRefused(f"not a {name}")
        return parsed

    return read


# What duration_iso_string writes: [-]P<days>DT<hh>H<mm>M<ss>[.<ffffff>]S.
_DURATION = re.compile(r"(-?)P(\d+)DT(\d\d)H(\d\d)M(\d\d)(?:\.(\d{1,6}))?S")


def _parse_duration(text: str) -> timedelta | None:
    """An ISO 8601 duration: the shape this module writes, fast; any other
    shape through Django's parser."""
    match = _DURATION.fullmatch(text)
    if match is None:
        return parse_duration(text)
    sign, days, hours, minutes, seconds, fraction = match.groups()
    value = timedelta(
        days=int(days),
        hours=int(hours),
        minutes=int(minutes),
        seconds=int(seconds),
        microseconds=int((fraction or "0").ljust(6, "0")),
    )
    return -value if sign else value


def _read_string(value: Any) -> str:
    if not isinstance(value, str):
        raise CellRefused("not a string")
    return value


_READ: dict[str, Callable[[Any], Any]] = {
    "integer": _read_integer,
    "number": _read_number,
    "decimal": _read_decimal,
    "boolean": _read_boolean,
    "string": _read_string,
    "datetime": _parsed("datetime (ISO 8601)", datetime.fromisoformat),
    "date": _parsed("date (ISO 8601)", date.fromisoformat),
    "time": _parsed("time (ISO 8601)", time.fromisoformat),
    "duration": _parsed("duration (ISO 8601)", _parse_duration),
    "uuid": _parsed("UUID", UUID),
    "json": lambda value: value,
}


def _csv_reader(kind: str) -> Callable[[str], Any]:
    read = _READ[kind]
    if kind == "string":
        return lambda text: None if text == ESCAPE else restore(text)
    if kind == "json":

        def read_json(text: str) -> Any:
            if text == "":
                return None
            try:
                return json.loads(restore(text))
            except ValueError:
                raise CellRefused("not JSON") from None

        return read_json
    if kind in ("integer", "number", "decimal", "boolean"):
        return lambda text: None if text == "" else read(text)
    return lambda text: None if text == "" else read(restore(text))


def _json_reader(kind: str) -> Callable[[Any], Any]:
    read = _READ[kind]
    if kind == "json":
        return read
    return lambda value: None if value is None else read(value)


def decode_part(
    format: str, columns: Sequence[Column], data: bytes, *, header: bool
) -> Iterator[list[Any]]:
    """The rows of one part, each a list of values in column order.

    Raises:
        CellRefused: a line that is not a row of these columns, or a cell
            its column cannot read (``line``, from 1, and ``column`` set).
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CellRefused("the part is not UTF-8") from None
    if format == "csv":
        yield from _decode_csv(columns, text, header=header)
    else:
        yield from _decode_ndjson(columns, text)


def _decode_csv(
    columns: Sequence[Column], text: str, *, header: bool
) -> Iterator[list[Any]]:
    readers = [_csv_reader(c.type) for c in columns]
    for n, record in enumerate(csv.reader(io.StringIO(text, newline="")), 1):
        if header and n == 1:
            if record != [neutralise(c.name) for c in columns]:
                raise _at(CellRefused("the header is not the manifest's columns"), n)
            continue
        if len(record) != len(columns):
            raise _at(CellRefused(f"{len(record)} cells, not {len(columns)}"), n)
        yield _cells(readers, record, n)


def _decode_ndjson(columns: Sequence[Column], text: str) -> Iterator[list[Any]]:
    readers = [_json_reader(c.type) for c in columns]
    names = [c.name for c in columns]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # every line ends in a newline
    for n, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError:
            raise _at(CellRefused("not a JSON object"), n) from None
        if not isinstance(record, dict) or record.keys() != set(names):
            raise _at(CellRefused("not an object of the manifest's columns"), n)
        yield _cells(readers, [record[name] for name in names], n)


def _at(refused: CellRefused, line: int) -> CellRefused:
    refused.line = line
    return refused
