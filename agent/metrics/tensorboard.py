"""Scalars from TensorBoard event files (`events.out.tfevents.*`), read incrementally.

TensorBoard's own loader opens files by name and follows links wherever they lead;
the files here are the agent's, read host-side, so they are opened confined (through
the sandbox, agent/metrics/files.py) and the bytes handed here. The format is small
enough to read directly: TFRecord framing (a little-endian u64 length, a u32 CRC, the
record, a u32 CRC) around `Event` protocol buffers, of which only the scalar fields
are decoded: `step`, `wall_time`, and each summary value's `tag` with its
`simple_value` (PyTorch's `add_scalar`, TF1) or a one-element float tensor (TF2's
`tf.summary.scalar`). The tests check this against TensorBoard's own reader.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAX_RECORD_BYTES = 64 * 1024 * 1024
"""A record longer than this is not a TensorBoard record: the file is not one."""


class Malformed(Exception):
    """The bytes are not TensorBoard records (or not the protocol buffers inside)."""


@dataclass(frozen=True)
class Scalar:
    tag: str
    value: float
    step: int
    wall_time: float


def _varint(data: bytes, pos: int) -> tuple[int, int]:
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


def _fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of one message; a length-delimited value is
    its bytes, a fixed-width one its raw integer."""
    out: list[tuple[int, int, int | bytes]] = []
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, wire, value))
        elif wire == 1:
            if pos + 8 > end:
                raise Malformed("a truncated 64-bit field")
            out.append((number, wire, int.from_bytes(data[pos : pos + 8], "little")))
            pos += 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > end:
                raise Malformed("a truncated field")
            out.append((number, wire, data[pos : pos + size]))
            pos += size
        elif wire == 5:
            if pos + 4 > end:
                raise Malformed("a truncated 32-bit field")
            out.append((number, wire, int.from_bytes(data[pos : pos + 4], "little")))
            pos += 4
        else:
            raise Malformed(f"wire type {wire}")
    return out


def _f32(raw: int) -> float:
    return struct.unpack("<f", raw.to_bytes(4, "little"))[0]


def _f64(raw: int) -> float:
    return struct.unpack("<d", raw.to_bytes(8, "little"))[0]


_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64 = 1, 2, 3, 9


def _tensor_scalar(data: bytes) -> float | None:
    """The value of a one-element numeric TensorProto; None for anything else."""
    dtype = 0
    values: list[float] = []
    content = b""
    for number, wire, value in _fields(data):
        if number == 1 and isinstance(value, int):
            dtype = value
        elif number == 4 and isinstance(value, bytes):
            content = value
        elif number == 5:  # float_val, packed or not
            if isinstance(value, bytes):
                values += [v for (v,) in struct.iter_unpack("<f", value[: len(value) // 4 * 4])]
            elif wire == 5:
                values.append(_f32(value))
        elif number == 6:  # double_val
            if isinstance(value, bytes):
                values += [v for (v,) in struct.iter_unpack("<d", value[: len(value) // 8 * 8])]
            elif wire == 1:
                values.append(_f64(value))
        elif number in (7, 10) and isinstance(value, int) and wire == 0:  # int_val, int64_val
            values.append(float(value if value < 2**63 else value - 2**64))
    if not values and content:
        unpack = {_DT_FLOAT: "<f", _DT_DOUBLE: "<d", _DT_INT32: "<i", _DT_INT64: "<q"}.get(dtype)
        if unpack is not None and len(content) == struct.calcsize(unpack):
            values = [float(struct.unpack(unpack, content)[0])]
    if dtype not in (_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64) or len(values) != 1:
        return None
    return values[0]


def _plugin(metadata: bytes) -> str | None:
    for number, _, value in _fields(metadata):
        if number == 1 and isinstance(value, bytes):  # plugin_data
            for inner, _, name in _fields(value):
                if inner == 1 and isinstance(name, bytes):
                    return name.decode("utf-8", "replace")
    return None


def _scalars(event: bytes, plugins: dict[str, str]) -> list[Scalar]:
    step, wall_time = 0, 0.0
    summaries: list[bytes] = []
    for number, wire, value in _fields(event):
        if number == 1 and wire == 1 and isinstance(value, int):
            wall_time = _f64(value)
        elif number == 2 and wire == 0 and isinstance(value, int):
            step = value if value < 2**63 else value - 2**64
        elif number == 5 and isinstance(value, bytes):
            summaries.append(value)
    out: list[Scalar] = []
    for summary in summaries:
        for number, _, value in _fields(summary):
            if number != 1 or not isinstance(value, bytes):
                continue
            tag = ""
            scalar: float | None = None
            tensor = b""
            for field_no, wire, item in _fields(value):
                if field_no == 1 and isinstance(item, bytes):
                    tag = item.decode("utf-8", "replace")
                elif field_no == 2 and wire == 5 and isinstance(item, int):
                    scalar = _f32(item)
                elif field_no == 8 and isinstance(item, bytes):
                    tensor = item
                elif field_no == 9 and isinstance(item, bytes):
                    plugin = _plugin(item)
                    if plugin is not None and tag:
                        plugins[tag] = plugin
            # A tag's metadata comes with its first value only; a tag another plugin
            # owns (histograms, text) is never a scalar.
            if scalar is None and tensor and plugins.get(tag, "scalars") == "scalars":
                scalar = _tensor_scalar(tensor)
            if tag and scalar is not None:
                out.append(Scalar(tag, scalar, step, wall_time))
    return out


@dataclass
class TensorBoardReader:
    """One event file's reading so far: where the next record starts, and which
    plugin owns each tag (a tag's metadata is written with its first value only)."""

    offset: int = 0
    plugins: dict[str, str] | None = None

    def read(self, data: bytes, file_size: int) -> list[Scalar]:
        """The scalars of the whole records in `data` (the file's bytes from `offset`);
        advances `offset` past them. A record cut short waits for the next read; one
        longer than `data` but whole in the file is skipped (an image, a graph)."""
        if self.plugins is None:
            self.plugins = {}
        out: list[Scalar] = []
        pos = 0
        while len(data) - pos >= 12:
            (length,) = struct.unpack_from("<Q", data, pos)
            if length > MAX_RECORD_BYTES:
                raise Malformed(f"a record of {length} bytes")
            end = pos + 12 + length + 4
            if end > len(data):
                if self.offset + end <= file_size and pos == 0:
                    self.offset += end  # too big to read at once: not a scalar's
                    return out
                break
            out += _scalars(data[pos + 12 : pos + 12 + length], self.plugins)
            pos = end
        self.offset += pos
        return out


def is_event_file(name: str) -> bool:
    return name.startswith("events.out.tfevents.")


__all__ = ["Malformed", "Scalar", "TensorBoardReader", "is_event_file"]
