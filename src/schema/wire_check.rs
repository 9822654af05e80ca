//! Structural check of protobuf bytes before quick-protobuf sees them.
//!
//! quick-protobuf 0.8 does not bound a nested field's length by its
//! parent's: a sub-message whose inner length runs past its own end makes
//! the reader's cursor pass its limit, which panics on overflow in debug
//! builds (and reads the wrong bytes in release). Frames come from
//! untrusted peers, so we first walk the wire format and require that every
//! length-delimited field fits inside its parent, recursing into the
//! fields the schema declares as messages.
//!
//! Schemas are small hand-written tables; only message-typed fields need
//! listing (everything else is checked for framing only).

use crate::protozero::decode::{DecodeError, FieldIter};

/// Which fields of a message are themselves messages.
#[derive(Debug)]
pub struct MsgSchema {
    /// `(field number, schema)` for every message-typed field.
    pub messages: &'static [(u32, &'static MsgSchema)],
}

/// A message with no message-typed fields.
pub static LEAF: MsgSchema = MsgSchema { messages: &[] };

static BIND_SERVICE_REPLY: MsgSchema = MsgSchema {
    messages: &[(3, &LEAF)], // methods: MethodInfo
};

/// `IPCFrame`: fields 3..8 (the `msg` oneof) are messages.
pub static IPC_FRAME: MsgSchema = MsgSchema {
    messages: &[
        (3, &LEAF),
        (4, &BIND_SERVICE_REPLY),
        (5, &LEAF),
        (6, &LEAF),
        (7, &LEAF),
        (8, &LEAF),
    ],
};

/// Nesting deeper than this is refused (recursive schemas stay bounded).
const MAX_DEPTH: usize = 32;

/// Why bytes are not a well-formed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// A varint longer than 10 bytes or cut off.
    BadVarint,
    /// A field runs past the end of its enclosing message.
    Overrun,
    /// Wire type 3, 4 (groups), 6 or 7.
    BadWireType(u8),
    /// Field number 0.
    BadFieldNumber,
    /// Nested beyond the depth limit.
    TooDeep,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::BadVarint => f.write_str("malformed varint"),
            WireError::Overrun => f.write_str("field runs past the end of its message"),
            WireError::BadWireType(t) => write!(f, "unsupported wire type {t}"),
            WireError::BadFieldNumber => f.write_str("field number 0"),
            WireError::TooDeep => f.write_str("message nested too deeply"),
        }
    }
}

impl std::error::Error for WireError {}

/// What the walker needs from a schema: which fields hold messages.
trait Nesting: Copy {
    fn sub(self, field: u64) -> Option<Self>;
}

impl Nesting for &'static MsgSchema {
    fn sub(self, field: u64) -> Option<Self> {
        self.messages
            .iter()
            .find(|(f, _)| u64::from(*f) == field)
            .map(|(_, s)| *s)
    }
}

impl Nesting for &'static crate::schema::MessageDesc {
    fn sub(self, field: u64) -> Option<Self> {
        u32::try_from(field)
            .ok()
            .and_then(|f| self.field_by_number(f))
            .and_then(|f| f.message_type())
    }
}

/// Checks that `bytes` is a well-formed message of `schema`.
pub fn check_message(bytes: &[u8], schema: &'static MsgSchema) -> Result<(), WireError> {
    check_at_depth(bytes, schema, 0)
}

/// Checks `bytes` against a message of the generated schema table.
pub fn check_message_desc(
    bytes: &[u8],
    desc: &'static crate::schema::MessageDesc,
) -> Result<(), WireError> {
    check_at_depth(bytes, desc, 0)
}

/// Checks the arguments of IPC method `method` (request type
/// `<method>Request`, Perfetto's naming). Methods whose request type the
/// table lacks are checked for top-level framing only.
pub fn check_method_args(method: &str, args: &[u8]) -> Result<(), WireError> {
    match crate::schema::message(&format!("{method}Request")) {
        Some(desc) => check_message_desc(args, desc),
        None => check_message(args, &LEAF),
    }
}

/// Checks a reply to IPC method `method` (`<method>Response`) the same
/// way: clients decode replies from a service they do not control.
pub fn check_method_reply(method: &str, reply: &[u8]) -> Result<(), WireError> {
    match crate::schema::message(&format!("{method}Response")) {
        Some(desc) => check_message_desc(reply, desc),
        None => check_message(reply, &LEAF),
    }
}

/// Decodes untrusted bytes as `M` with quick-protobuf after checking them
/// against `M`'s schema (quick-protobuf trusts nested lengths). `M` must
/// be a message of our schema table, found by its Rust type name.
pub fn decode_checked<'a, M: quick_protobuf::MessageRead<'a>>(
    bytes_untrusted: &'a [u8],
) -> Result<M, String> {
    let full = std::any::type_name::<M>();
    let name = full.rsplit("::").next().unwrap_or(full);
    let desc = crate::schema::message(name).ok_or_else(|| format!("{name}: not in the schema"))?;
    check_message_desc(bytes_untrusted, desc).map_err(|e| e.to_string())?;
    crate::protozero::decode::decode_message(bytes_untrusted).map_err(|e| e.to_string())
}

fn check_at_depth<S: Nesting>(bytes: &[u8], schema: S, depth: usize) -> Result<(), WireError> {
    if depth > MAX_DEPTH {
        return Err(WireError::TooDeep);
    }
    let mut fields = FieldIter::new(bytes);
    for f in &mut fields {
        if f.wire_type == 2 {
            if let Some(sub_schema) = schema.sub(u64::from(f.number)) {
                check_at_depth(f.value, sub_schema, depth + 1)?;
            }
        }
    }
    match fields.error_kind() {
        None => Ok(()),
        Some(DecodeError::BadVarint) => Err(WireError::BadVarint),
        Some(DecodeError::Overrun) => Err(WireError::Overrun),
        Some(DecodeError::BadWireType(t)) => Err(WireError::BadWireType(t)),
        Some(DecodeError::BadFieldNumber) => Err(WireError::BadFieldNumber),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_checked_refuses_a_nested_overrun() {
        // TraceConfig.data_sources { config { ftrace_config { length past
        // its parent } } }: quick-protobuf alone panics on it in debug.
        let bad = [0x12, 0x05, 0x0a, 0x03, 0xa2, 0x06, 0x7f];
        let r = decode_checked::<crate::pb::protos::TraceConfig>(&bad);
        assert!(r.is_err());
        let ok = decode_checked::<crate::pb::protos::TraceConfig>(&[0x20, 0x01]);
        assert!(ok.is_ok());
    }

    #[test]
    fn every_reply_our_clients_decode_has_a_schema() {
        // The CLI's and traced_probes' decoded replies: without a schema the
        // check would only look at the top level.
        for m in [
            "EnableTracing",
            "ObserveEvents",
            "ReadBuffers",
            "QueryServiceState",
            "GetTraceStats",
            "Flush",
            "Detach",
            "Attach",
            "CloneSession",
            "InitializeConnection",
            "GetAsyncCommand",
        ] {
            assert!(
                crate::schema::message(&format!("{m}Response")).is_some(),
                "{m}Response"
            );
        }
        // ReadBuffersResponse.slices (2) is a message; a slice whose data
        // length runs past it is refused.
        assert_eq!(
            check_method_reply("ReadBuffers", &[0x12, 0x02, 0x0a, 0x05]),
            Err(WireError::Overrun)
        );
        assert_eq!(
            check_method_reply("ReadBuffers", &[0x12, 0x03, 0x0a, 0x01, 0x41]),
            Ok(())
        );
    }

    #[test]
    fn accepts_well_formed_and_rejects_nested_overruns() {
        // request_id=1, msg_bind_service{ service_name="ab" }
        let ok = [0x10, 0x01, 0x1a, 0x04, 0x0a, 0x02, b'a', b'b'];
        assert_eq!(check_message(&ok, &IPC_FRAME), Ok(()));
        // Same, but the inner string claims 3 bytes inside a 4-byte message.
        let bad = [0x10, 0x01, 0x1a, 0x04, 0x0a, 0x03, b'a', b'b', b'c'];
        assert_eq!(check_message(&bad, &IPC_FRAME), Err(WireError::Overrun));
        // The reply's MethodInfo is checked too (two levels down).
        let bad_reply = [0x22, 0x04, 0x1a, 0x02, 0x12, 0x05];
        assert_eq!(
            check_message(&bad_reply, &IPC_FRAME),
            Err(WireError::Overrun)
        );
        // Unknown length-delimited fields only need to fit.
        assert_eq!(check_message(&[0x4a, 0x01, 0xff], &IPC_FRAME), Ok(()));
        assert_eq!(
            check_message(&[0x4a, 0x02, 0xff], &IPC_FRAME),
            Err(WireError::Overrun)
        );
    }

    #[test]
    fn rejects_bad_framing() {
        assert_eq!(
            check_message(&[0x0b], &IPC_FRAME),
            Err(WireError::BadWireType(3))
        );
        assert_eq!(
            check_message(&[0x00, 0x00], &IPC_FRAME),
            Err(WireError::BadFieldNumber)
        );
        assert_eq!(
            check_message(&[0x10, 0x80], &IPC_FRAME),
            Err(WireError::BadVarint)
        );
        assert_eq!(
            check_message(
                &[0x10; 1]
                    .iter()
                    .chain(&[0xff; 11])
                    .copied()
                    .collect::<Vec<_>>(),
                &IPC_FRAME
            ),
            Err(WireError::BadVarint)
        );
        assert_eq!(
            check_message(&[0x09, 1, 2, 3], &IPC_FRAME),
            Err(WireError::Overrun)
        );
        assert_eq!(check_message(&[0x0d, 1, 2, 3, 4], &IPC_FRAME), Ok(()));
        // A length that only fits after truncation to 32 bits is refused.
        let huge = [0x4a, 0x81, 0x80, 0x80, 0x80, 0x10, 0xff];
        assert_eq!(check_message(&huge, &IPC_FRAME), Err(WireError::Overrun));
    }

    static SELF_NESTED: MsgSchema = MsgSchema {
        messages: &[(1, &SELF_NESTED)],
    };

    #[test]
    fn depth_is_bounded() {
        let mut msg: Vec<u8> = Vec::new();
        for _ in 0..40 {
            let mut outer = vec![0x0a, msg.len() as u8];
            outer.extend(&msg);
            msg = outer;
        }
        assert_eq!(check_message(&msg, &SELF_NESTED), Err(WireError::TooDeep));
    }

    #[test]
    fn method_args_are_checked_through_the_schema_table() {
        // CommitDataRequest{ chunks_to_move { page: 1 } }: fine.
        assert_eq!(
            check_method_args("CommitData", &[0x0a, 0x02, 0x08, 0x01]),
            Ok(())
        );
        // The nested message claims a 5-byte field inside 2 bytes.
        assert_eq!(
            check_method_args("CommitData", &[0x0a, 0x02, 0x22, 0x05]),
            Err(WireError::Overrun)
        );
        // EnableTracingRequest.trace_config.buffers { size_kb } overrunning.
        let bad = [0x0a, 0x04, 0x0a, 0x02, 0x0a, 0x09];
        assert_eq!(
            check_method_args("EnableTracing", &bad),
            Err(WireError::Overrun)
        );
    }
}
