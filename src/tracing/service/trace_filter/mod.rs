//! TraceConfig.trace_filter: upstream's packet filter. The bytecode (see
//! [`bytecode`]) allowlists fields per message, rooted at
//! `perfetto.protos.Trace`; the service runs every packet it writes out
//! (ReadBuffers and write_into_file) through [`TraceFilter::filter_packet`],
//! starting at `Trace.packet`. Pure: no OS access.
//!
//! Upstream's string filter rules (regex redaction) are not implemented:
//! a config with a `string_filter_chain` is refused. String fields the
//! bytecode marks for filtering are kept as they are, which is what
//! upstream does with an empty rule chain.

pub mod bytecode;

use crate::pb::protos::mod_TraceConfig::TraceFilter as TraceFilterConfig;
use crate::protozero::decode::{read_varint, FieldIter, RawField};
use crate::protozero::{encode_varint, varint_len};

pub use bytecode::{FieldRule, FilterTables};

/// Nesting deeper than this makes the packet an error, as protobuf's usual
/// recursion limit does (real traces nest a handful of levels; upstream's
/// filter has no limit, its stack being a vector).
const MAX_DEPTH: usize = 100;
/// `Trace.packet`.
const TRACE_PACKET_FIELD: u32 = 1;

/// A loaded filter, rooted at TracePacket.
#[derive(Debug, Clone)]
pub struct TraceFilter {
    tables: FilterTables,
    root: u32,
}

/// Counters for TraceStats.filter_stats.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterStats {
    pub input_packets: u64,
    pub input_bytes: u64,
    pub output_bytes: u64,
    pub errors: u64,
    /// Indexed by the session's buffer index.
    pub bytes_discarded_per_buffer: Vec<u64>,
}

/// The packet is not a well-formed message; it is emitted empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MalformedPacket;

impl TraceFilter {
    /// Loads raw bytecode (+ optional overlay) rooted at `Trace`.
    pub fn from_bytecode(
        bytecode_untrusted: &[u8],
        overlay_untrusted: &[u8],
    ) -> Result<Self, String> {
        let tables = FilterTables::load(bytecode_untrusted, overlay_untrusted)
            .map_err(|e| format!("Trace filter bytecode invalid: {e}"))?;
        let root = match tables.query(0, TRACE_PACKET_FIELD) {
            FieldRule::Nested(i) => i,
            _ => {
                return Err(
                    "Trace filter bytecode invalid: Trace.packet (field 1 of the root \
                     message) is not an allowed message"
                        .into(),
                )
            }
        };
        Ok(TraceFilter { tables, root })
    }

    /// The filter a TraceConfig asks for (`bytecode_v2` wins over
    /// `bytecode`, as upstream). String filter chains are refused.
    pub fn from_config(cfg: &TraceFilterConfig) -> Result<Self, String> {
        let chains = [&cfg.string_filter_chain, &cfg.string_filter_chain_v54];
        if chains
            .iter()
            .any(|c| c.as_ref().is_some_and(|c| !c.rules.is_empty()))
        {
            return Err(
                "trace_filter.string_filter_chain is not supported by this traced \
                 (string redaction rules); remove it or record with upstream traced"
                    .into(),
            );
        }
        let v1 = cfg.bytecode.as_deref().unwrap_or_default();
        let v2 = cfg.bytecode_v2.as_deref().unwrap_or_default();
        let code = if v2.is_empty() { v1 } else { v2 };
        let overlay = cfg.bytecode_overlay_v54.as_deref().unwrap_or_default();
        Self::from_bytecode(code, overlay)
    }

    /// Appends the filtered TracePacket `packet` to `out`. On error `out`
    /// is left as it was.
    pub fn filter_packet(&self, packet: &[u8], out: &mut Vec<u8>) -> Result<(), MalformedPacket> {
        let start = out.len();
        let r = self.filter_message(self.root, packet, out, 0);
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    fn filter_message(
        &self,
        msg: u32,
        bytes: &[u8],
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), MalformedPacket> {
        if depth > MAX_DEPTH {
            return Err(MalformedPacket);
        }
        let mut it = FieldIter::new(bytes);
        for f in it.by_ref() {
            let rule = self.tables.query(msg, f.number);
            match (rule, f.wire_type) {
                (FieldRule::Nested(m), 2) if !f.value.is_empty() => {
                    put_varint_bytes(((f.number as u64) << 3) | 2, out);
                    // The filtered message is no longer than the original:
                    // its length keeps the size the original's minimal
                    // length took, padded (as upstream does).
                    let size_len = varint_len(f.value.len() as u64);
                    let at = out.len();
                    out.resize(at + size_len, 0);
                    self.filter_message(m, f.value, out, depth + 1)?;
                    let written = (out.len() - at - size_len) as u64;
                    put_padded_varint(written, &mut out[at..at + size_len]);
                }
                (FieldRule::Simple, _) | (FieldRule::String | FieldRule::Nested(_), 2) => {
                    copy_field(&f, out)
                }
                // Dropped; non-simple rules keep only length-delimited values.
                _ => {}
            }
        }
        if it.error {
            return Err(MalformedPacket);
        }
        Ok(())
    }
}

fn put_varint_bytes(v: u64, out: &mut Vec<u8>) {
    let mut b = [0u8; 10];
    let n = encode_varint(v, &mut b);
    out.extend_from_slice(&b[..n]);
}

/// Copies a kept field re-encoded minimally (tag, varint, length), as
/// upstream does, so both emit the same bytes.
fn copy_field(f: &RawField<'_>, out: &mut Vec<u8>) {
    put_varint_bytes(((f.number as u64) << 3) | f.wire_type as u64, out);
    match f.wire_type {
        0 => put_varint_bytes(read_varint(f.value).map_or(0, |(v, _)| v), out),
        2 => {
            put_varint_bytes(f.value.len() as u64, out);
            out.extend_from_slice(f.value);
        }
        _ => out.extend_from_slice(f.value),
    }
}

/// Writes `v` as a varint filling exactly `dst` (continuation bits on all
/// but the last byte).
fn put_padded_varint(v: u64, dst: &mut [u8]) {
    let last = dst.len() - 1;
    for (i, b) in dst.iter_mut().enumerate() {
        let bits = (v >> (7 * i)) as u8 & 0x7f;
        *b = if i < last { bits | 0x80 } else { bits };
    }
}

#[cfg(test)]
pub(super) mod tests;
