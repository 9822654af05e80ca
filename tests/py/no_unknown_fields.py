"""Every field of every packet must be known to upstream's descriptors
(PyPI perfetto's perfetto_trace_pb2) or declared by the trace's own
extension_descriptor packets (TracePacket field 72), as trace_processor
reads them. The trace_config packet (the user's config as given) and
for_testing packets (test producers' payloads) are not checked. Packets
inside compressed_packets (zlib) and zstd_compressed_packets are checked
in their place, as trace_processor reads them.

As a module: unknown_fields(trace_bytes) -> ["packet[i].path", ...];
decompressed(packet) -> the Trace bytes inside a compressed packet.
As a script: no_unknown_fields.py TRACE...; exit status 1 if any.
"""
import sys
import zlib

import zstandard

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.unknown_fields import UnknownFieldSet
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def register_extensions(trace):
    """Adds the files of the trace's extension_descriptor packets to the
    default pool. Returns whether any was new (the trace must then be
    parsed again for its extension fields to be known)."""
    pool = descriptor_pool.Default()
    added = False
    for p in trace.packet:
        if not p.HasField("extension_descriptor"):
            continue
        for f in p.extension_descriptor.extension_set.file:
            try:
                pool.FindFileByName(f.name)
                continue
            except KeyError:
                pass
            # perfetto's own copy of descriptor.proto: same wire format.
            pool.Add(descriptor_pb2.FileDescriptorProto.FromString(f.SerializeToString()))
            message_factory.GetMessageClassesForFiles([f.name], pool)
            added = True
    return added


def _walk(msg, path, out):
    if len(UnknownFieldSet(msg)):
        out.append(f"{path}: {[u.field_number for u in UnknownFieldSet(msg)]}")
    for fd, value in msg.ListFields():
        if fd.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        name = f"{path}.{fd.name}"
        if fd.is_repeated:
            if fd.message_type.GetOptions().map_entry:
                continue
            for i, v in enumerate(value):
                _walk(v, f"{name}[{i}]", out)
        else:
            _walk(value, name, out)


def decompressed(p):
    """The Trace bytes inside a compressed_packets or zstd_compressed_packets
    packet; None for any other packet."""
    if p.HasField("compressed_packets"):
        return zlib.decompress(p.compressed_packets)
    if p.HasField("zstd_compressed_packets"):
        # A stream: frames need not carry their size.
        return zstandard.ZstdDecompressor().decompressobj().decompress(p.zstd_compressed_packets)
    return None


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def flattened(data):
    """`data` with every compressed packet replaced by the packets inside
    it (Trace bytes)."""
    trace = pb.Trace()
    trace.ParseFromString(data)
    if not any(decompressed(p) is not None for p in trace.packet):
        return data
    out = bytearray()
    for p in trace.packet:
        raw = decompressed(p)
        if raw is not None:
            out += flattened(raw)
        else:
            body = p.SerializeToString()
            out += b"\x0a" + _varint(len(body)) + body
    return bytes(out)


def unknown_fields(data):
    data = flattened(data)
    trace = pb.Trace()
    trace.ParseFromString(data)
    if register_extensions(trace):
        trace = pb.Trace()
        trace.ParseFromString(data)
    out = []
    for i, p in enumerate(trace.packet):
        if p.HasField("trace_config") or p.HasField("for_testing"):
            # The user's config, echoed as given (as upstream's traced
            # does): tracebox's own config options (e.g.
            # PerfEventConfig.tracebox_function_names) are there only when
            # the config sets them. for_testing: test producers' payloads.
            continue
        _walk(p, f"packet[{i}]", out)
    return out


def main():
    bad = 0
    for name in sys.argv[1:]:
        with open(name, "rb") as f:
            found = unknown_fields(f.read())
        for u in found[:20]:
            print(f"{name}: unknown field at {u}")
        bad += len(found)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()


def assert_known(data, name):
    """Fails (AssertionError) naming the first unknown fields of `data`."""
    found = unknown_fields(data)
    assert not found, f"{name}: fields outside upstream's schema: {found[:10]}"
