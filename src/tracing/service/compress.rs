//! `compression_type: COMPRESSION_TYPE_DEFLATE` (or `compression {
//! deflate {} }`): the packets of each read pass leave the service as one
//! `compressed_packets` packet, a zlib stream of `Trace.packet` fields, as
//! upstream writes them; trace_processor and the Perfetto UI inflate it.
//! zstd is not built: a config asking only for zstd is read uncompressed,
//! as by an upstream service built without it.

use crate::pb::protos::mod_TraceConfig::CompressionType;
use crate::pb::protos::TraceConfig;
use crate::protozero::encode_varint;

use super::read_pass::PacketSink;
use super::trace_buffer::TracePacket;

/// `TracePacket.compressed_packets` (field 50, length-delimited).
const COMPRESSED_PACKETS_TAG: [u8; 2] = [0x92, 0x03];
/// Upstream's zlib level.
const LEVEL: u8 = 6;
/// Uncompressed bytes per compressed packet at least (a read pass over
/// IPC is smaller; deflate needs room to find repeats).
pub const MIN_PASS_BYTES: usize = 256 * 1024;

pub fn wants_deflate(cfg: &TraceConfig) -> bool {
    cfg.compression
        .as_ref()
        .is_some_and(|c| c.deflate.is_some())
        || cfg.compression_type == Some(CompressionType::COMPRESSION_TYPE_DEFLATE)
}

/// Collects a pass's packets as `Trace.packet` fields.
#[derive(Default)]
pub struct DeflateSink {
    raw: Vec<u8>,
    /// A rotation's old-file pass: packets for the new file are held here
    /// uncompressed (see rotate_divert).
    pub divert: Option<super::rotate_divert::Divert>,
    /// Packets held at the last cut (already `Trace.packet` fields): they
    /// go before the first buffer's, compressed with them.
    pub lead: Vec<u8>,
}

impl PacketSink for DeflateSink {
    fn packet(&mut self, body: &TracePacket<'_>, trailer: &[u8]) -> bool {
        let mut v = [0u8; 10];
        let n = encode_varint((body.size() + trailer.len()) as u64, &mut v);
        if let Some(d) = self.divert.as_mut() {
            let slices: Vec<&[u8]> = body.slices().collect();
            let route = d.route(&slices, trailer, &mut self.raw);
            if let super::rotate_divert::Route::Hold(i) = route {
                let held = d.held_mut(i);
                held.push(0x0a);
                held.extend_from_slice(&v[..n]);
                slices.iter().for_each(|s| held.extend_from_slice(s));
                held.extend_from_slice(trailer);
                return true;
            }
        }
        self.raw.push(0x0a);
        self.raw.extend_from_slice(&v[..n]);
        body.slices().for_each(|s| self.raw.extend_from_slice(s));
        self.raw.extend_from_slice(trailer);
        true
    }

    fn set_buffer(&mut self, index: Option<usize>) {
        if index.is_some() {
            self.raw.append(&mut self.lead);
        }
    }
}

impl DeflateSink {
    /// The collected packets as one `compressed_packets` packet (none if
    /// the pass had no packets).
    pub fn finish(mut self) -> Option<Vec<u8>> {
        // No buffer was read: the held packets still go in.
        self.raw.append(&mut self.lead);
        if self.raw.is_empty() {
            return None;
        }
        let z = miniz_oxide::deflate::compress_to_vec_zlib(&self.raw, LEVEL);
        let mut v = [0u8; 10];
        let n = encode_varint(z.len() as u64, &mut v);
        let mut out = Vec::with_capacity(2 + n + z.len());
        out.extend_from_slice(&COMPRESSED_PACKETS_TAG);
        out.extend_from_slice(&v[..n]);
        out.extend_from_slice(&z);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protozero::decode::FieldIter;

    #[test]
    fn packets_come_back_whole_after_inflating() {
        let mut s = DeflateSink::default();
        let data = [1u8, 2, 3, 4, 5];
        let ranges = [(0, 2), (3, 2)];
        for _ in 0..100 {
            assert!(s.packet(&TracePacket::from_ranges(&data, &ranges), &[9, 9]));
        }
        let pkt = s.finish().unwrap();
        let f: Vec<_> = FieldIter::new(&pkt).collect();
        assert_eq!((f.len(), f[0].number, f[0].wire_type), (1, 50, 2));
        let raw = miniz_oxide::inflate::decompress_to_vec_zlib(f[0].value).unwrap();
        let inner: Vec<_> = FieldIter::new(&raw).collect();
        assert_eq!(inner.len(), 100);
        assert!(inner
            .iter()
            .all(|p| p.number == 1 && p.value == [1, 2, 4, 5, 9, 9]));
        assert!(DeflateSink::default().finish().is_none());
    }

    #[test]
    fn either_config_field_asks_for_deflate() {
        let mut c = TraceConfig::default();
        assert!(!wants_deflate(&c));
        c.compression_type = Some(CompressionType::COMPRESSION_TYPE_DEFLATE);
        assert!(wants_deflate(&c));
        let mut c = TraceConfig {
            compression: Some(Default::default()),
            ..Default::default()
        };
        assert!(!wants_deflate(&c), "zstd or nothing: not built");
        c.compression.as_mut().unwrap().deflate = Some(Default::default());
        assert!(wants_deflate(&c));
    }
}
