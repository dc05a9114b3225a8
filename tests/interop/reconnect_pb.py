"""Hand-written protobuf codec for the grpc.testing messages the reconnect test uses.

No generated stubs and no protobuf package: the messages are tiny, and writing the wire format by
hand keeps this client independent of the server's prost-generated code.

    message ReconnectParams { int32 max_reconnect_backoff_ms = 1; }
    message ReconnectInfo { bool passed = 1; repeated int32 backoff_ms = 2; }
    message Empty {}
"""

START = "/grpc.testing.ReconnectService/Start"
STOP = "/grpc.testing.ReconnectService/Stop"

WIRE_VARINT, WIRE_I64, WIRE_LEN, WIRE_I32 = 0, 1, 2, 5


def varint(n):
    """Base-128 varint; negative int32/int64 values take ten bytes (two's complement)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_varint(buf, pos):
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


def as_int32(value):
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def reconnect_params(max_reconnect_backoff_ms):
    """ReconnectParams; proto3 omits a zero field."""
    if max_reconnect_backoff_ms == 0:
        return b""
    return b"\x08" + varint(max_reconnect_backoff_ms)


EMPTY = b""


def decode_reconnect_info(buf):
    """Returns (passed, backoff_ms). Field 2 may be packed or not; unknown fields are skipped."""
    passed, backoff_ms, pos = False, [], 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == WIRE_VARINT:
            value, pos = read_varint(buf, pos)
            if field == 1:
                passed = value != 0
            elif field == 2:
                backoff_ms.append(as_int32(value))
        elif wire == WIRE_LEN:
            length, pos = read_varint(buf, pos)
            end = pos + length
            if end > len(buf):
                raise ValueError("truncated length-delimited field")
            if field == 2:
                while pos < end:
                    value, pos = read_varint(buf, pos)
                    backoff_ms.append(as_int32(value))
                if pos != end:
                    raise ValueError("packed field overruns its length")
            pos = end
        elif wire == WIRE_I64:
            pos += 8
        elif wire == WIRE_I32:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(buf):
            raise ValueError("truncated fixed-size field")
    return passed, backoff_ms


def self_test():
    """The codec against hand-checked bytes, including what a non-prost encoder may send."""
    assert reconnect_params(0) == b""
    assert reconnect_params(2000) == b"\x08\xd0\x0f"
    assert reconnect_params(-1) == b"\x08" + b"\xff" * 9 + b"\x01"
    assert decode_reconnect_info(b"") == (False, [])
    # packed: passed=true, backoff_ms=[1000, 1600]
    assert decode_reconnect_info(b"\x08\x01\x12\x04\xe8\x07\xc0\x0c") == (True, [1000, 1600])
    # unpacked, plus an unknown varint field 3, fixed64 field 4, string field 5, fixed32 field 6
    unpacked = (
        b"\x10\xe8\x07" + b"\x18\x05" + b"\x21" + b"\0" * 8 + b"\x2a\x02hi"
        + b"\x35" + b"\0" * 4 + b"\x10\xc0\x0c" + b"\x08\x00"
    )
    assert decode_reconnect_info(unpacked) == (False, [1000, 1600])
    # mixed packed and unpacked, and a negative value
    mixed = b"\x12\x02\xe8\x07" + b"\x10" + varint(-5)
    assert decode_reconnect_info(mixed) == (False, [1000, -5])
    for bad in (b"\x12\x05\x01", b"\x08", b"\x21\0"):
        try:
            decode_reconnect_info(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted truncated {bad!r}")
