"""Loading a trace with PyPI perfetto's descriptors, and checking that
every message in it (nested ones included) decoded without unknown
fields: each field we write exists in upstream's schema."""
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.unknown_fields import UnknownFieldSet

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def load_trace(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    assert trace.packet, f"{path}: empty trace"
    return trace


def _repeated(fd):
    # protobuf 7 dropped FieldDescriptor.label.
    if hasattr(fd, "is_repeated"):
        return fd.is_repeated
    return fd.label == FieldDescriptor.LABEL_REPEATED


# Fields of ours beyond upstream's schema, on purpose and numbered far
# above upstream's: traced's service events (src/schema/service_events.rs)
# and switches the kernel never recorded (FtraceCpuStats 1001).
OUR_EXTENSIONS = {
    "perfetto.protos.TracingServiceEvent": set(range(1001, 1008)),
    "perfetto.protos.FtraceCpuStats": {1001},
}


def _walk(msg, where, bad):
    ours = OUR_EXTENSIONS.get(msg.DESCRIPTOR.full_name, set())
    nums = sorted({f.field_number for f in UnknownFieldSet(msg)} - ours)
    if nums:
        bad.append(f"{where} ({msg.DESCRIPTOR.full_name}): unknown fields {nums}")
    for fd, value in msg.ListFields():
        if fd.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if fd.message_type.GetOptions().map_entry:
            continue
        items = value if _repeated(fd) else [value]
        for i, m in enumerate(items):
            _walk(m, f"{where}.{fd.name}[{i}]", bad)


def assert_no_unknown_fields(trace):
    bad = []
    for i, p in enumerate(trace.packet):
        _walk(p, f"packet[{i}]", bad)
    assert not bad, "\n".join(bad[:20])
