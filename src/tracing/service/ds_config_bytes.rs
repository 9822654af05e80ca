//! Byte-level protobuf walking for configs the service must forward
//! verbatim.
//!
//! pb-rs drops unknown fields and re-encodes sub-messages, but producers must
//! receive every byte of their `DataSourceConfig` that the service does not
//! own (typed sub-configs, fields newer than this build). So the service
//! finds each `DataSourceConfig` inside the raw `TraceConfig` and edits it by
//! removing the service-owned fields and appending fresh values.

use crate::protozero::{put_varint, VecStream};

use crate::protozero::decode::FieldIter;

/// `TraceConfig.data_sources` and `TraceConfig.DataSource.config`.
const TRACE_CONFIG_DATA_SOURCES: u32 = 2;
const DATA_SOURCE_CONFIG: u32 = 1;

/// The raw `DataSourceConfig` bytes of every `TraceConfig.data_sources`
/// entry, in order (empty for an entry without `config`). `None` if the
/// bytes are not a well-formed message.
pub fn raw_data_source_configs(trace_config: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut it = FieldIter::new(trace_config);
    for f in it.by_ref() {
        if f.number != TRACE_CONFIG_DATA_SOURCES || f.wire_type != 2 {
            continue;
        }
        // Last `config` occurrence wins, as in protobuf; repeated
        // occurrences of a message would merge, which we do not need.
        let mut cfg = Vec::new();
        let mut inner = FieldIter::new(f.value);
        for g in inner.by_ref() {
            if g.number == DATA_SOURCE_CONFIG && g.wire_type == 2 {
                cfg = g.value.to_vec();
            }
        }
        if inner.error {
            return None;
        }
        out.push(cfg);
    }
    if it.error {
        return None;
    }
    Some(out)
}

/// DataSourceConfig fields the service overwrites before sending the config
/// to a producer.
pub mod ds_field {
    pub const TARGET_BUFFER: u32 = 2;
    pub const TRACE_DURATION_MS: u32 = 3;
    pub const TRACING_SESSION_ID: u32 = 4;
    pub const ENABLE_EXTRA_GUARDRAILS: u32 = 6;
    pub const STOP_TIMEOUT_MS: u32 = 7;
    pub const SESSION_INITIATOR: u32 = 8;
    pub const PREFER_SUSPEND_CLOCK_FOR_DURATION: u32 = 122;
}

/// The service-owned values of a DataSourceConfig.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnedDsFields {
    pub target_buffer: u32,
    pub trace_duration_ms: u32,
    pub stop_timeout_ms: u32,
    pub enable_extra_guardrails: bool,
    /// `SessionInitiator` enum value.
    pub session_initiator: u32,
    pub tracing_session_id: u64,
    /// Only written when true (so configs that never had it stay as sent).
    pub prefer_suspend_clock_for_duration: bool,
}

/// Copies `raw` minus every occurrence of the owned fields, then appends
/// the owned values. Other bytes keep their order and encoding. A malformed
/// tail (should not happen: the config was decoded before) is dropped.
pub fn rewrite_data_source_config(raw: &[u8], owned: &OwnedDsFields) -> Vec<u8> {
    use ds_field::*;
    let is_owned = |n: u32| {
        matches!(
            n,
            TARGET_BUFFER
                | TRACE_DURATION_MS
                | TRACING_SESSION_ID
                | ENABLE_EXTRA_GUARDRAILS
                | STOP_TIMEOUT_MS
                | SESSION_INITIATOR
                | PREFER_SUSPEND_CLOCK_FOR_DURATION
        )
    };
    let mut out = VecStream::with_capacity(raw.len() + 32);
    let mut bytes = Vec::with_capacity(raw.len() + 32);
    for f in FieldIter::new(raw) {
        if !is_owned(f.number) {
            bytes.extend_from_slice(f.whole);
        }
    }
    put_varint(&mut out, TARGET_BUFFER, owned.target_buffer as u64);
    put_varint(&mut out, TRACE_DURATION_MS, owned.trace_duration_ms as u64);
    put_varint(&mut out, TRACING_SESSION_ID, owned.tracing_session_id);
    put_varint(
        &mut out,
        ENABLE_EXTRA_GUARDRAILS,
        owned.enable_extra_guardrails as u64,
    );
    put_varint(&mut out, STOP_TIMEOUT_MS, owned.stop_timeout_ms as u64);
    put_varint(&mut out, SESSION_INITIATOR, owned.session_initiator as u64);
    if owned.prefer_suspend_clock_for_duration {
        put_varint(&mut out, PREFER_SUSPEND_CLOCK_FOR_DURATION, 1);
    }
    bytes.extend_from_slice(out.as_bytes());
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protozero::decode::decode_message;
    use crate::protozero::{put_bytes, put_str};

    fn owned() -> OwnedDsFields {
        OwnedDsFields {
            target_buffer: 7,
            trace_duration_ms: 1000,
            stop_timeout_ms: 5000,
            enable_extra_guardrails: false,
            session_initiator: 0,
            tracing_session_id: 42,
            prefer_suspend_clock_for_duration: false,
        }
    }

    #[test]
    fn rewrite_keeps_unknown_and_subconfig_bytes() {
        let mut s = VecStream::new();
        put_str(&mut s, 1, "linux.ftrace");
        put_varint(&mut s, 2, 1); // consumer's relative buffer
        put_varint(&mut s, 4, 999); // forged session id
        put_bytes(&mut s, 100, &[0x0a, 0x03, b'a', b'b', b'c']); // ftrace_config
        put_varint(&mut s, 5000, 77); // unknown field
        put_varint(&mut s, 8, 1); // forged TRUSTED_SYSTEM
        let raw = s.into_bytes();
        let out = rewrite_data_source_config(&raw, &owned());
        let fields: Vec<_> = FieldIter::new(&out)
            .map(|f| (f.number, f.value.to_vec()))
            .collect();
        assert_eq!(fields[0], (1, b"linux.ftrace".to_vec()));
        assert_eq!(fields[1], (100, vec![0x0a, 0x03, b'a', b'b', b'c']));
        assert_eq!(fields[2].0, 5000);
        let get = |n: u32| {
            fields
                .iter()
                .filter(|f| f.0 == n)
                .map(|f| f.1.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(get(2), vec![vec![7]]);
        assert_eq!(get(4), vec![vec![42]]);
        assert_eq!(get(8), vec![vec![0]]);
        assert!(get(122).is_empty());
        // Decodes as a DataSourceConfig with the owned values.
        let cfg: crate::pb::protos::DataSourceConfig = decode_message(&out).unwrap();
        assert_eq!(cfg.target_buffer, Some(7));
        assert_eq!(cfg.tracing_session_id, Some(42));
        assert_eq!(cfg.stop_timeout_ms, Some(5000));
    }

    #[test]
    fn extracts_data_source_configs_in_order() {
        let mut ds1 = VecStream::new();
        put_str(&mut ds1, 1, "a");
        put_varint(&mut ds1, 4242, 3);
        let mut e1 = VecStream::new();
        put_bytes(&mut e1, 1, ds1.as_bytes());
        put_str(&mut e1, 2, "filter");
        let mut tc = VecStream::new();
        put_bytes(&mut tc, 1, &[0x08, 0x04]);
        put_bytes(&mut tc, 2, e1.as_bytes());
        put_bytes(&mut tc, 2, &[]);
        let cfgs = raw_data_source_configs(tc.as_bytes()).unwrap();
        assert_eq!(cfgs, vec![ds1.into_bytes(), vec![]]);
        assert!(raw_data_source_configs(&[0x12, 0x05, 0x00]).is_none());
    }

    #[test]
    fn field_iter_rejects_garbage_without_panicking() {
        for input in [
            &[0xff_u8; 12][..],
            &[0x0b],
            &[0x12, 0x80],
            &[0x09, 1, 2],
            &[0x00],
        ] {
            let mut it = FieldIter::new(input);
            while it.next().is_some() {}
            assert!(it.error, "{input:?}");
        }
    }
}
