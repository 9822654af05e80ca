//! The `TracingServiceEvent` fields traced writes to say what a session
//! asked for and did not get, and their encoding: the service writes them
//! (`tracing::service::faults`), the client reads them back
//! (`cmd::trace_faults`). Upstream readers skip the fields they do not know.

use crate::protozero::{begin_nested, end_nested, put_str, VecStream};

/// `TracingServiceEvent` fields. 7 and 8 are upstream's; the others are
/// tracebox's, numbered far above upstream's so they never collide.
pub mod field {
    pub const SLOW_STARTING_DATA_SOURCES: u32 = 7;
    /// Upstream's: data sources that had not acknowledged the final flush
    /// when `flush_timeout_ms` ran out.
    pub const LAST_FLUSH_SLOW_DATA_SOURCES: u32 = 8;
    pub const PRODUCER_DISCONNECTED: u32 = 1001;
    pub const DATA_SOURCES_NOT_OFFERED: u32 = 1002;
    pub const DATA_SOURCES_NOT_SET_UP: u32 = 1003;
    pub const CONFIG_FIELDS_IGNORED: u32 = 1004;
    /// Relay (TCP/vsock) connections traced dropped during the session
    /// for a missing, repeated or invalid SetPeerIdentity (varint count).
    pub const RELAY_CONNECTIONS_DROPPED: u32 = 1005;
    /// Chunks of a producer under shared-memory emulation that never
    /// reached traced (gaps in a writer's chunk ids): `{ producer (1),
    /// count (2) }`.
    pub const CHUNKS_NEVER_ARRIVED: u32 = 1006;
    /// Data sources that had not acknowledged StopDataSource when
    /// `data_source_stop_timeout_ms` ran out (a `DataSources` list).
    pub const DATA_SOURCES_STOP_TIMED_OUT: u32 = 1007;
    /// Beside a `PRODUCER_DISCONNECTED` of a relayed producer (varint):
    /// what it wrote in this many ms before the disconnect may not have
    /// been committed, so may be missing (traced's relay commit period).
    pub const UNCOMMITTED_WINDOW_MS: u32 = 1008;
    /// A rotation cut could not happen (string, the client's reason): the
    /// file being written holds the rest of the trace, past `--rotate-*`.
    pub const ROTATION_STOPPED: u32 = 1009;
}

/// One `(producer, data source)` of a `DataSources` event.
pub type DsName = (String, String);

/// A `TracingServiceEvent` whose one field is a `DataSources` list.
pub fn data_sources_event(field: u32, list: &[DsName]) -> Vec<u8> {
    let mut s = VecStream::new();
    let n = begin_nested(&mut s, field);
    for (producer, ds) in list {
        let d = begin_nested(&mut s, 1);
        if !producer.is_empty() {
            put_str(&mut s, 1, producer);
        }
        put_str(&mut s, 2, ds);
        end_nested(&mut s, d);
    }
    end_nested(&mut s, n);
    s.into_bytes()
}
