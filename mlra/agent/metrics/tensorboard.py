"""Scalars from TensorBoard event files (`events.out.tfevents.*`), read incrementally.

TensorBoard's own loader opens files by name and follows links wherever they lead;
the files here are the agent's, read host-side, so they are opened confined (through
the sandbox, agent/metrics/files.py) and the bytes handed here. The format is small
enough to read directly: TFRecord framing (a little-endian u64 length, its masked
CRC-32C, the record, a u32 CRC) around `Event` protocol buffers, of which only the
scalar fields are decoded: `step`, `wall_time`, and each summary value's `tag` with its
`simple_value` (PyTorch's `add_scalar`, TF1) or a one-element float tensor (TF2's
`tf.summary.scalar`). The tests check this against TensorBoard's own reader.

The file is the agent's, so what is held of it is bounded whatever it holds: at most
`MAX_TAGS` tags of at most `MAX_TAG_BYTES` each (a tag past either is not read, and
counted), and of a tag's plugin metadata only whether it is the scalars plugin's.
Each record is decoded on its own: one that does not decode is skipped and counted,
and one whose length does not check (a corrupt header) is passed over to the next
record whose header does. The record's own CRC is not checked (pure Python CRC-32C of
every byte would cost more than the decoding); the header's 8 bytes are.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

MAX_RECORD_BYTES = 64 * 1024 * 1024
"""A record longer than this is not a TensorBoard record: the file is not one."""
MAX_TAGS = 1024
"""Distinct tags held a file; a value of a tag past this is not read (counted)."""
MAX_TAG_BYTES = 256
"""A longer tag is not a curve's name: its values are not read (counted)."""
MAX_RESYNC_CHECKS = 100_000
"""Candidate headers tried in one read while looking past a corrupt one; the search
goes on at the next read, so one read's work stays bounded."""


class Malformed(Exception):
    """The bytes are not TensorBoard records (or not the protocol buffers inside)."""


@dataclass(frozen=True)
class Scalar:
    tag: str
    value: float
    step: int
    wall_time: float


def _crc_table() -> tuple[int, ...]:
    table: list[int] = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C = _crc_table()


def masked_crc32c(data: bytes | memoryview) -> int:
    """TFRecord's checksum: CRC-32C (Castagnoli), rotated and offset."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


_ZERO_HEADER = bytes(12)
"""Twelve zero bytes: no header (the checksum of a zero length is not zero)."""
_NONZERO = re.compile(rb"[^\0]")


def _header_ok(data: bytes | memoryview, pos: int) -> bool:
    (length, crc) = struct.unpack_from("<QI", data, pos)
    return length <= MAX_RECORD_BYTES and masked_crc32c(data[pos : pos + 8]) == crc


Buffer = bytes | memoryview


def _varint(data: Buffer, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise Malformed("a truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: Buffer) -> list[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value) of one message; a length-delimited value is
    a view of its bytes (never a copy), a fixed-width one its raw integer."""
    view = memoryview(data)
    out: list[tuple[int, int, int | memoryview]] = []
    pos, end = 0, len(view)
    while pos < end:
        key, pos = _varint(view, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(view, pos)
            out.append((number, wire, value))
        elif wire == 1:
            if pos + 8 > end:
                raise Malformed("a truncated 64-bit field")
            out.append((number, wire, int.from_bytes(view[pos : pos + 8], "little")))
            pos += 8
        elif wire == 2:
            size, pos = _varint(view, pos)
            if pos + size > end:
                raise Malformed("a truncated field")
            out.append((number, wire, view[pos : pos + size]))
            pos += size
        elif wire == 5:
            if pos + 4 > end:
                raise Malformed("a truncated 32-bit field")
            out.append((number, wire, int.from_bytes(view[pos : pos + 4], "little")))
            pos += 4
        else:
            raise Malformed(f"wire type {wire}")
    return out


def _f32(raw: int) -> float:
    return struct.unpack("<f", raw.to_bytes(4, "little"))[0]


def _f64(raw: int) -> float:
    return struct.unpack("<d", raw.to_bytes(8, "little"))[0]


_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64 = 1, 2, 3, 9


def _tensor_scalar(data: Buffer) -> float | None:
    """The value of a one-element numeric TensorProto; None for anything else."""
    dtype = 0
    values: list[float] = []
    content: Buffer = b""
    for number, wire, value in _fields(data):
        if number == 1 and isinstance(value, int):
            dtype = value
        elif number == 4 and isinstance(value, memoryview):
            content = value
        elif number == 5:  # float_val, packed or not
            if isinstance(value, memoryview):
                values += [v for (v,) in struct.iter_unpack("<f", value[: len(value) // 4 * 4])]
            elif wire == 5:
                values.append(_f32(value))
        elif number == 6:  # double_val
            if isinstance(value, memoryview):
                values += [v for (v,) in struct.iter_unpack("<d", value[: len(value) // 8 * 8])]
            elif wire == 1:
                values.append(_f64(value))
        elif number in (7, 10) and isinstance(value, int) and wire == 0:  # int_val, int64_val
            values.append(float(value if value < 2**63 else value - 2**64))
        if len(values) > 1:
            return None
    if not values and content:
        unpack = {_DT_FLOAT: "<f", _DT_DOUBLE: "<d", _DT_INT32: "<i", _DT_INT64: "<q"}.get(dtype)
        if unpack is not None and len(content) == struct.calcsize(unpack):
            values = [float(struct.unpack(unpack, content)[0])]
    if dtype not in (_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64) or len(values) != 1:
        return None
    return values[0]


def _is_scalars_plugin(metadata: Buffer) -> bool | None:
    """Whether a tag's SummaryMetadata names the scalars plugin; None where it names
    none. Only this is kept of it: the name is compared, never stored."""
    for number, _, value in _fields(metadata):
        if number == 1 and isinstance(value, memoryview):  # plugin_data
            for inner, _, name in _fields(value):
                if inner == 1 and isinstance(name, memoryview):
                    return name == b"scalars"
    return None


@dataclass
class TensorBoardReader:
    """One event file's reading so far: where the next record starts, and for each tag
    whether its values may be scalars (a tag's metadata comes with its first value
    only). A rewritten file gets a new reader (files.py)."""

    offset: int = 0
    tags: dict[str, bool] = field(default_factory=lambda: {})
    """Tag -> whether its plugin is the scalars one (or none was named)."""
    records: int = 0
    bad_records: int = 0
    """Records skipped: not decodable, or a header that does not check."""
    first_bad: str = ""
    dropped_values: int = 0
    """Values of tags past MAX_TAGS or longer than MAX_TAG_BYTES, not read."""
    lost: bool = False
    """A header did not check: looking for the next one that does."""

    def held_bytes(self) -> int:
        """About what this reader keeps of the file (its tags), for the tests' bound."""
        return sum(len(tag) + 64 for tag in self.tags)

    def read(self, data: bytes, file_size: int) -> list[Scalar]:
        """The scalars of the whole records in `data` (the file's bytes from `offset`);
        advances `offset` past them. A record cut short waits for the next read; one
        longer than `data` but whole in the file is skipped (an image, a graph)."""
        view = memoryview(data)
        out: list[Scalar] = []
        pos = 0
        while True:
            if self.lost:
                pos, self.lost = self._resync(data, pos)
                if self.lost:
                    break
            if len(data) - pos < 12:
                break
            if not _header_ok(view, pos):
                if self.offset + pos == 0:
                    (length,) = struct.unpack_from("<Q", view, pos)
                    raise Malformed(f"its first record's header does not check ({length} bytes)")
                self._bad("a record whose header does not check")
                self.lost = True
                pos += 1
                continue
            (length,) = struct.unpack_from("<Q", view, pos)
            end = pos + 12 + length + 4
            if end > len(data):
                if self.offset + end <= file_size and pos == 0:
                    self.offset += end  # too big to read at once: not a scalar's
                    return out
                break
            self.records += 1
            try:
                out += self._scalars(view[pos + 12 : pos + 12 + length])
            except Exception as exc:  # any fault of one record skips that record only
                self._bad(f"a record that does not decode ({type(exc).__name__}: {exc})"[:200])
            pos = end
        self.offset += pos
        return out

    def _bad(self, why: str) -> None:
        self.bad_records += 1
        self.first_bad = self.first_bad or why

    def _resync(self, data: bytes, pos: int) -> tuple[int, bool]:
        """The next position from `pos` whose header checks, and False; or where the
        search stopped, and True (still lost). A header's length is under 2^32, so
        only a position followed by four zero bytes at +4 is tried."""
        for _ in range(MAX_RESYNC_CHECKS):
            zeros = data.find(b"\0\0\0\0", pos + 4)
            if zeros < 0:
                return max(pos, len(data) - 11), True
            pos = zeros - 4
            if pos + 12 > len(data):
                return pos, True
            if data[pos : pos + 12] == _ZERO_HEADER:  # never a header: past the zeros
                more = _NONZERO.search(data, pos)
                if more is None:
                    return max(pos, len(data) - 11), True
                pos = max(pos + 1, more.start() - 11)
                continue
            if _header_ok(data, pos):
                return pos, False
            pos += 1
        return pos, True

    def _tag(self, raw: memoryview) -> str | None:
        """The tag's name, once it is held (None: past a cap, its value not read)."""
        if len(raw) > MAX_TAG_BYTES:
            return None
        tag = str(raw, "utf-8", "replace")
        if tag not in self.tags:
            if len(self.tags) >= MAX_TAGS:
                return None
            self.tags[tag] = True
        return tag

    def _scalars(self, event: memoryview) -> list[Scalar]:
        step, wall_time = 0, 0.0
        summaries: list[memoryview] = []
        for number, wire, value in _fields(event):
            if number == 1 and wire == 1 and isinstance(value, int):
                wall_time = _f64(value)
            elif number == 2 and wire == 0 and isinstance(value, int):
                step = value if value < 2**63 else value - 2**64
            elif number == 5 and isinstance(value, memoryview):
                summaries.append(value)
        out: list[Scalar] = []
        for summary in summaries:
            for number, _, value in _fields(summary):
                if number != 1 or not isinstance(value, memoryview):
                    continue
                raw_tag: memoryview | None = None
                scalar: float | None = None
                tensor: memoryview | None = None
                plugin_scalars: bool | None = None
                for field_no, wire, item in _fields(value):
                    if field_no == 1 and isinstance(item, memoryview):
                        raw_tag = item
                    elif field_no == 2 and wire == 5 and isinstance(item, int):
                        scalar = _f32(item)
                    elif field_no == 8 and isinstance(item, memoryview):
                        tensor = item
                    elif field_no == 9 and isinstance(item, memoryview):
                        plugin_scalars = _is_scalars_plugin(item)
                if raw_tag is None or not len(raw_tag):
                    continue
                tag = self._tag(raw_tag)
                if tag is None:
                    self.dropped_values += 1
                    continue
                if plugin_scalars is not None:
                    self.tags[tag] = plugin_scalars
                # A tag's metadata comes with its first value only; a tag another plugin
                # owns (histograms, text) is never a scalar.
                if scalar is None and tensor is not None and self.tags[tag]:
                    scalar = _tensor_scalar(tensor)
                if scalar is not None:
                    out.append(Scalar(tag, scalar, step, wall_time))
        return out


def is_event_file(name: str) -> bool:
    return name.startswith("events.out.tfevents.")


__all__ = [
    "MAX_TAGS",
    "MAX_TAG_BYTES",
    "Malformed",
    "Scalar",
    "TensorBoardReader",
    "is_event_file",
    "masked_crc32c",
]
