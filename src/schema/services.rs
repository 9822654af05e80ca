//! IPC method tables, generated from the `service` blocks in proto/ipc/.
//!
//! Perfetto numbers methods 1..N in declaration order when a service is
//! bound, so these lists must keep the .proto order.

// A call enum lives for one dispatch; boxing its big variants buys nothing.
#![allow(clippy::large_enum_variant)]

include!(concat!(env!("OUT_DIR"), "/services.rs"));

use super::wire_check::WireError;

/// Why a call's arguments were refused.
#[derive(Debug)]
pub enum CallError {
    /// No such method on this service.
    UnknownMethod,
    /// The bytes are not a well-formed message of the method's request.
    Malformed(WireError),
    /// Well-formed, but quick-protobuf could not decode it.
    Undecodable(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::UnknownMethod => f.write_str("unknown method"),
            CallError::Malformed(e) => write!(f, "malformed arguments: {e}"),
            CallError::Undecodable(e) => write!(f, "undecodable arguments: {e}"),
        }
    }
}

fn decode<'a, M: quick_protobuf::MessageRead<'a>>(bytes: &'a [u8]) -> Result<M, CallError> {
    crate::protozero::decode::decode_message(bytes)
        .map_err(|e| CallError::Undecodable(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_port_order() {
        assert_eq!(PRODUCER_PORT_METHODS.len(), 12);
        assert_eq!(PRODUCER_PORT_METHODS[0], "InitializeConnection");
        assert_eq!(PRODUCER_PORT_METHODS[4], "GetAsyncCommand");
        assert_eq!(PRODUCER_PORT_METHODS[11], "UpdateDataSource");
    }

    #[test]
    fn consumer_port_order() {
        assert_eq!(CONSUMER_PORT_METHODS.len(), 16);
        assert_eq!(CONSUMER_PORT_METHODS[0], "EnableTracing");
        assert_eq!(CONSUMER_PORT_METHODS[2], "ReadBuffers");
        assert_eq!(CONSUMER_PORT_METHODS[14], "CloneSession");
        assert_eq!(CONSUMER_PORT_METHODS[15], "RotateOutputFile");
    }

    #[test]
    fn calls_decode_by_method_name() {
        // FlushRequest { timeout_ms: 7 }
        match ConsumerPortCall::decode("Flush", &[0x08, 0x07]).unwrap() {
            ConsumerPortCall::Flush(r) => assert_eq!(r.timeout_ms, Some(7)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            ConsumerPortCall::decode("Nope", &[]),
            Err(CallError::UnknownMethod)
        ));
        // A nested length that runs past its parent: refused before decode.
        assert!(matches!(
            ProducerPortCall::decode("CommitData", &[0x0a, 0x05, 0x08]),
            Err(CallError::Malformed(_))
        ));
    }

    #[test]
    fn relay_port_order() {
        assert_eq!(RELAY_PORT_METHODS, ["InitRelay", "SyncClock"]);
    }
}
