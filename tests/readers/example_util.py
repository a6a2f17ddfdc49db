"""Serialized Examples compared by what they hold, whatever their layout."""

from __future__ import annotations

import asyncreader as ar
from asyncreader._decoders import wire

__all__ = ["canonical", "entries", "protobuf_example_class"]


def entries(record: bytes) -> list[bytes]:
    """The keys of a serialized Example's map entries, in the record's order (repeats kept)."""
    if not record:
        return []
    assert record[0] == 0x0A
    pos, end = wire._length(record, 1, len(record))
    assert end == len(record)
    keys = []
    while pos < end:
        assert record[pos] == 0x0A
        start, stop = wire._length(record, pos + 1, end)
        assert record[start] == 0x0A
        key_start, key_stop = wire._length(record, start + 1, stop)
        keys.append(record[key_start:key_stop])
        pos = stop
    return keys


def canonical(values: list[bytes]) -> list[bytes]:
    """Each record parsed and serialized again (shortest varints, keys in protobuf's
    deterministic order): the row path's bytes of the same Example. A key twice fails."""
    out = []
    for value in values:
        keys = entries(value)
        assert len(set(keys)) == len(keys), keys
        out.append(ar.Example.FromString(value).SerializeToString())
    return out


def protobuf_example_class() -> type:
    """``tf.train.Example`` as the protobuf runtime builds it from TensorFlow's
    ``example.proto`` / ``feature.proto`` (an independent parser of the records)."""
    from google.protobuf import (  # type: ignore[import-untyped]
        descriptor_pb2,
        descriptor_pool,
        message_factory,
    )

    proto = descriptor_pb2.FileDescriptorProto(
        name="asyncreader_test_example.proto", package="tftest", syntax="proto3"
    )
    field = descriptor_pb2.FieldDescriptorProto
    repeated, optional = field.LABEL_REPEATED, field.LABEL_OPTIONAL

    def message(name: str, fields: list[tuple[str, int, int, int, str | None]]) -> None:
        m = proto.message_type.add(name=name)
        for field_name, number, label, kind, type_name in fields:
            f = m.field.add(name=field_name, number=number, label=label, type=kind)
            if type_name:
                f.type_name = type_name
        if name == "Features":
            entry = m.nested_type.add(name="FeatureEntry")
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, label=optional, type=field.TYPE_STRING)
            entry.field.add(
                name="value",
                number=2,
                label=optional,
                type=field.TYPE_MESSAGE,
                type_name=".tftest.Feature",
            )

    message("BytesList", [("value", 1, repeated, field.TYPE_BYTES, None)])
    message("FloatList", [("value", 1, repeated, field.TYPE_FLOAT, None)])
    message("Int64List", [("value", 1, repeated, field.TYPE_INT64, None)])
    message(
        "Feature",
        [
            ("bytes_list", 1, optional, field.TYPE_MESSAGE, ".tftest.BytesList"),
            ("float_list", 2, optional, field.TYPE_MESSAGE, ".tftest.FloatList"),
            ("int64_list", 3, optional, field.TYPE_MESSAGE, ".tftest.Int64List"),
        ],
    )
    feature = proto.message_type[3]
    feature.oneof_decl.add(name="kind")
    for f in feature.field:
        f.oneof_index = 0
    message(
        "Features",
        [("feature", 1, repeated, field.TYPE_MESSAGE, ".tftest.Features.FeatureEntry")],
    )
    message("Example", [("features", 1, optional, field.TYPE_MESSAGE, ".tftest.Features")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    example: type = message_factory.GetMessageClass(pool.FindMessageTypeByName("tftest.Example"))
    return example
