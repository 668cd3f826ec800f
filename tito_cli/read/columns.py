"""The decoded columns: one row group's (or slice's) columns, handing out rows as :class:`RawTurn`.

A row's ids, logprobs and texts are numpy views into the decoded column:
nothing is sorted, taken, cast or converted to Python lists.  What the first
pass (:mod:`.index_pass`) and the second (:mod:`.rows`) both decode, and the
row model validation (:mod:`.validate`) reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyarrow as pa

from .._arrow import NUMPY_TYPES, all_finite, numpy_view, true_cells, validity
from ..schema import PROVENANCE_FIELDS, REFERENCE_COLUMNS
from ..turns import RowRef

__all__ = ["INT32_MAX", "INT64_MAX", "Columns", "RawTurn", "Text", "int64_values"]

_LIST_COLUMNS = ("prompt_ids", "output_ids", "output_logprobs")
INT32_MAX = 2**31 - 1
_TIMESTAMP = pa.timestamp("us", tz="UTC")
INT64_MAX = 2**63 - 1
_TEXT_COLUMNS = ("finish_reason", "prompt_messages", "response_message", "tools", "metadata")

#: A text cell: its UTF-8 bytes as a numpy view into the decoded column (as the
#: reader hands it out: validation decodes it, and rejects the session if it is
#: not UTF-8), or a str (rows built by hand).
Text = np.ndarray | str

#: A row's provenance cells: weight versions, sampling and call kind texts; routed experts' bytes,
#: start, layers and topk.
ProvenanceCells = tuple[Text | None, Text | None, Text | None, bytes | None, int | None, int | None, int | None]


@dataclass(slots=True)
class RawTurn:
    """One turns row before validation; ids are numpy views into the read columns."""

    seq: int | None
    prompt_ids: np.ndarray | None
    output_ids: np.ndarray | None
    output_logprobs: np.ndarray | None
    finish_reason: Text | None
    #: A prompt's JSON text is the whole conversation so far (hundreds of
    #: kilobytes): kept as bytes, the parser decodes only the part that is new.
    prompt_messages: Text | None
    response_message: Text | None
    tools: Text | None
    metadata: Text | None
    source: RowRef
    #: True when the row group's statistics show every prompt and output id in
    #: 0..INT32_MAX, so validation need not scan them again.
    ids_in_range: bool = False
    #: True when every logprob value the row's columns hold is finite (one check for
    #: the whole column), so validation need not check the row's own again.
    logprobs_finite: bool = False
    #: Format 2 (docs/spec.md §9): the earlier turn this row stores only the new part of
    #: its prompt against, and how many leading ids and messages it shares with it.  A
    #: format-1 row, or a format-2 row stored whole, has ``base_seq`` ``None``.
    base_seq: int | None = None
    shared_prompt_ids: int | None = None
    shared_messages: int | None = None
    #: When the turn completed; read only when asked for (``tito compact`` keeps it).
    timestamp: datetime | None = None
    #: The optional ``ill_formed`` column (SPEC §8.6); null or absent is false.
    ill_formed: bool = False
    #: (column, position) of the first null element inside a non-null list cell
    #: (``prompt_ids``, ``output_ids``, ``output_logprobs``): validation rejects the row.
    null_element: tuple[str, int] | None = None
    #: The provenance cells (docs/spec.md §2) when the file has them: ``weight_versions``,
    #: ``sampling`` and ``call_kind`` texts, the ``routed_experts`` bytes and its start, layers and topk.
    provenance: ProvenanceCells | None = None



def int64_values(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """An integer column as (int64 values, validity); values at null slots are 0.

    A ``uint64`` value beyond int64 counts as null here (it sorts last, as a
    null seq does); :func:`_beyond_int64` gives those rows their true values
    for validation to report.
    """
    valid = validity(array)
    if pa.types.is_null(array.type):
        return np.zeros(len(array), dtype=np.int64), valid
    big = _beyond_int64(array)
    if big:
        array = pa.array(
            [None if row in big else v for row, v in enumerate(array.to_pylist())], type=pa.int64()
        )
        valid = validity(array)
    # (cast goes through pyarrow.compute, a slow import: skip it when there is nothing to do)
    cast = array if pa.types.is_int64(array.type) else array.cast(pa.int64())
    # Straight from the data buffer: exact for any int64, and no float detour for nulls.
    values = np.frombuffer(cast.buffers()[1], dtype=np.int64, count=cast.offset + len(cast))[cast.offset :]
    if array.null_count:
        values = np.where(valid, values, 0)
    return values, valid


def _beyond_int64(array: pa.Array) -> dict[int, int]:
    """Row -> value of the cells of a ``uint64`` column above 2**63 - 1 (none for other types)."""
    if not pa.types.is_uint64(array.type) or len(array) == 0:
        return {}
    values = np.frombuffer(array.buffers()[1], dtype=np.uint64, count=array.offset + len(array))[array.offset :]
    rows = np.flatnonzero((values > INT64_MAX) & validity(array))
    return {int(r): int(values[r]) for r in rows}


class Columns:
    """One decoded row group, handing out rows as :class:`RawTurn` with numpy views for the ids."""

    def __init__(
        self,
        table: pa.Table,
        file_name: str,
        first_row: int,
        sources: Sequence[RowRef] | None = None,
        *,
        ids_in_range: bool = False,
    ) -> None:
        self.file_name = file_name
        self.ids_in_range = ids_in_range
        self.first_row = first_row
        #: Where each row came from, when the table is not one file's row group (the Ray engine).
        self.sources = sources
        names = table.column_names

        def array(name: str) -> pa.Array | None:
            if name not in names:
                return None
            column = table.column(name)
            return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()

        seq = array("seq")
        assert seq is not None  # a required column
        seq_values, seq_valid = int64_values(seq)
        # As lists, like _Slices's offsets: read a row at a time.
        self.seq: list[int] = seq_values.tolist()
        self.seq_valid: list[bool] = seq_valid.tolist()
        #: Rows whose seq is beyond int64 (a uint64 column): their exact value, for validation to reject.
        self.seq_beyond = _beyond_int64(seq)
        self.lists = {name: _Slices(array(name), _list_values) for name in _LIST_COLUMNS}
        # Usually none: only these need a look for a null inside a row's list.
        self._lists_with_null_elements = [(n, c) for n, c in self.lists.items() if c.values_valid is not None]
        logprobs = self.lists["output_logprobs"].values
        # The column's whole values buffer (a slice's parent's too): a false negative only costs the rows' own checks.
        self.logprobs_finite = logprobs is not None and logprobs.dtype.kind == "f" and all_finite(logprobs)
        ill_formed = array("ill_formed")
        #: Rows marked ill-formed (true; null is false): few or none, so a set of row numbers.
        marked = np.flatnonzero(true_cells(ill_formed)).tolist() if ill_formed is not None else []
        self.ill_formed = frozenset(marked)
        self.texts = {name: _Slices(array(name), _utf8_bytes) for name in _TEXT_COLUMNS}
        # Format 2's reference columns (absent in format 1: every row is stored whole).
        self.references: dict[str, tuple[list[int], list[bool]]] = {}
        for name in REFERENCE_COLUMNS:
            column = array(name)
            if column is not None:
                values, valid = int64_values(column)
                self.references[name] = (values.tolist(), valid.tolist())
        self.provenance: _ProvenanceColumns | None = None
        if any(name in names for name in _PROVENANCE_COLUMNS):
            self.provenance = _ProvenanceColumns(array)
        stamps = array("timestamp")
        self.timestamps: list[datetime | None] | None = None
        if stamps is not None:
            if pa.types.is_timestamp(stamps.type) and stamps.type != _TIMESTAMP:
                stamps = stamps.cast(_TIMESTAMP, safe=False)
            self.timestamps = stamps.to_pylist()

    def reference(self, name: str, r: int) -> int | None:
        column = self.references.get(name)
        if column is None or not column[1][r]:
            return None
        return column[0][r]

    def row(self, r: int) -> RawTurn:
        def text(name: str) -> Text | None:
            return self.texts[name].get(r)

        null_element = None
        for name, column in self._lists_with_null_elements:
            position = column.first_null_element(r)
            if position is not None:
                null_element = (name, position)
                break
        seq = self.seq[r] if self.seq_valid[r] else self.seq_beyond.get(r)
        return RawTurn(
            seq=seq,
            prompt_ids=self.lists["prompt_ids"].get(r),
            output_ids=self.lists["output_ids"].get(r),
            output_logprobs=self.lists["output_logprobs"].get(r),
            finish_reason=text("finish_reason"),
            prompt_messages=text("prompt_messages"),
            response_message=text("response_message"),
            tools=text("tools"),
            metadata=text("metadata"),
            source=RowRef(self.file_name, self.first_row + r) if self.sources is None else self.sources[r],
            ids_in_range=self.ids_in_range,
            logprobs_finite=self.logprobs_finite,
            base_seq=self.reference("base_seq", r),
            shared_prompt_ids=self.reference("shared_prompt_ids", r),
            shared_messages=self.reference("shared_messages", r),
            timestamp=None if self.timestamps is None else self.timestamps[r],
            ill_formed=r in self.ill_formed,
            null_element=null_element,
            provenance=None if self.provenance is None else self.provenance.row(r),
        )



_PROVENANCE_COLUMNS = tuple(field.name for field in PROVENANCE_FIELDS)


class _ProvenanceColumns:
    """The optional provenance columns of a row group (docs/spec.md §2)."""

    def __init__(self, array: Callable[[str], pa.Array | None]) -> None:
        self.texts = {name: _Slices(array(name), _utf8_bytes) for name in _PROVENANCE_COLUMNS[:3]}
        experts = array("routed_experts")
        self.experts = None if experts is None or pa.types.is_null(experts.type) else experts
        self.numbers: dict[str, tuple[list[int], list[bool]] | None] = {}
        for name in _PROVENANCE_COLUMNS[4:]:
            column = array(name)
            if column is None:
                self.numbers[name] = None
            else:
                values, valid = int64_values(column)
                self.numbers[name] = (values.tolist(), valid.tolist())

    def number(self, name: str, r: int) -> int | None:
        column = self.numbers[name]
        return None if column is None or not column[1][r] else column[0][r]

    def row(self, r: int) -> ProvenanceCells:
        data = None if self.experts is None else self.experts[r].as_py()
        return (
            self.texts["weight_versions"].get(r),
            self.texts["sampling"].get(r),
            self.texts["call_kind"].get(r),
            data,
            self.number("routed_experts_start", r),
            self.number("routed_experts_layers", r),
            self.number("routed_experts_topk", r),
        )


class _Slices:
    """Row access to a column of variable-length cells (lists, strings) as numpy views.

    A cell is a slice of the column's one values buffer between two offsets:
    for a list column its values, for a string column its UTF-8 bytes.
    """

    def __init__(self, array: pa.Array | None, values: Callable[[pa.Array], np.ndarray]) -> None:
        #: For a list column with null elements: the validity of its values (else ``None``).
        self.values_valid: np.ndarray | None = None
        # Python lists, not numpy arrays: every row reads a cell of each column, and a list's
        # item is a plain int (a numpy array's is a numpy scalar, made for each read).
        self.valid: list[bool] | None
        self.offsets: list[int] | None
        if array is None or pa.types.is_null(array.type):
            self.valid = self.offsets = self.values = None
            return
        self.valid = validity(array).tolist()
        large = pa.types.is_large_list(array.type) or pa.types.is_large_string(array.type)
        offsets = numpy_view(array.buffers()[1], np.int64 if large else np.int32, array.offset, len(array) + 1)
        self.offsets = offsets.tolist()
        self.values = values(array)
        if (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)) and array.values.null_count:
            # (.values is the whole child, not sliced: the offsets index it as they are.)
            self.values_valid = validity(array.values)

    def first_null_element(self, i: int) -> int | None:
        """Position of the first null element inside list cell ``i`` (``None``: none, or a null cell)."""
        if self.values_valid is None or self.valid is None or not self.valid[i]:
            return None
        assert self.offsets is not None
        inside = self.values_valid[self.offsets[i] : self.offsets[i + 1]]
        if inside.all():
            return None
        return int(np.argmin(inside))

    def get(self, i: int) -> np.ndarray | None:
        if self.valid is None or not self.valid[i]:
            return None
        assert self.offsets is not None and self.values is not None
        view: np.ndarray = self.values[self.offsets[i] : self.offsets[i + 1]]
        return view


def _list_values(array: pa.Array) -> np.ndarray:
    values = array.values
    if values.null_count and values.type in NUMPY_TYPES:
        # Rare: nulls inside a list (the rows holding them are rejected, _Slices.first_null_element).
        # Filled with 0, not NaN, so that the other rows keep their exact integer type.
        values = values.fill_null(0)
    if values.type not in NUMPY_TYPES:
        converted: np.ndarray = values.to_numpy(zero_copy_only=False)
        return converted
    return numpy_view(values.buffers()[1], NUMPY_TYPES[values.type], values.offset, len(values))


def _utf8_bytes(array: pa.Array) -> np.ndarray:
    # string or large_string (logfiles checks the schema); offsets index the whole buffer
    data = array.buffers()[2]
    return numpy_view(data, np.uint8, 0, 0 if data is None else data.size)
