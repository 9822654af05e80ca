//! Compressed read passes, as upstream writes them: the packets of each
//! read pass leave the service as one packet, their `Trace.packet` fields
//! in one zlib stream (`compression_type: COMPRESSION_TYPE_DEFLATE` or
//! `compression { deflate {} }`: `compressed_packets`, field 50) or in one
//! zstd frame (`compression { zstd { level: N } }`:
//! `zstd_compressed_packets`, field 133). trace_processor and the Perfetto
//! UI decompress both.

use crate::codec::zstd;
use crate::pb::protos::mod_TraceConfig::CompressionType;
use crate::pb::protos::TraceConfig;
use crate::protozero::encode_varint;

use super::read_pass::PacketSink;
use super::trace_buffer::TracePacket;

/// `TracePacket.compressed_packets` (field 50, length-delimited).
const COMPRESSED_PACKETS_TAG: [u8; 2] = [0x92, 0x03];
/// `TracePacket.zstd_compressed_packets` (field 133, length-delimited).
const ZSTD_COMPRESSED_PACKETS_TAG: [u8; 2] = [0xaa, 0x08];
/// Upstream's zlib level.
const LEVEL: u8 = 6;
/// Uncompressed bytes per compressed packet at least (a read pass over
/// IPC is smaller; deflate needs room to find repeats).
pub const MIN_PASS_BYTES: usize = 256 * 1024;

/// How a session's read passes are compressed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Codec {
    #[default]
    Deflate,
    /// libzstd's level (0: its default; clamped by libzstd).
    Zstd(i32),
}

/// The codec `cfg` asks for, by upstream's rule: of the `compression`
/// sub-messages set, the highest-numbered one this service knows (zstd =
/// 2 over deflate = 1); when it names none, the legacy `compression_type`.
pub fn codec(cfg: &TraceConfig) -> Option<Codec> {
    let c = cfg.compression.as_ref();
    if let Some(z) = c.and_then(|c| c.zstd.as_ref()) {
        return Some(Codec::Zstd(z.level.unwrap_or(0)));
    }
    if c.is_some_and(|c| c.deflate.is_some())
        || cfg.compression_type == Some(CompressionType::COMPRESSION_TYPE_DEFLATE)
    {
        return Some(Codec::Deflate);
    }
    None
}

/// Collects a pass's packets as `Trace.packet` fields.
#[derive(Default)]
pub struct CompressSink {
    pub codec: Codec,
    raw: Vec<u8>,
    /// A rotation's old-file pass: packets for the new file are held here
    /// uncompressed (see rotate_divert).
    pub divert: Option<super::rotate_divert::Divert>,
    /// Packets held at the last cut (already `Trace.packet` fields): they
    /// go before the first buffer's, compressed with them.
    pub lead: Vec<u8>,
}

impl PacketSink for CompressSink {
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

impl CompressSink {
    pub fn new(codec: Codec) -> Self {
        CompressSink {
            codec,
            ..Default::default()
        }
    }

    /// The collected packets as one `compressed_packets` or
    /// `zstd_compressed_packets` packet (none if the pass had no packets).
    pub fn finish(mut self) -> Option<Vec<u8>> {
        // No buffer was read: the held packets still go in.
        self.raw.append(&mut self.lead);
        if self.raw.is_empty() {
            return None;
        }
        let (tag, z) = match self.codec {
            Codec::Deflate => (
                COMPRESSED_PACKETS_TAG,
                miniz_oxide::deflate::compress_to_vec_zlib(&self.raw, LEVEL),
            ),
            Codec::Zstd(level) => (
                ZSTD_COMPRESSED_PACKETS_TAG,
                zstd::compress(&self.raw, level),
            ),
        };
        let mut v = [0u8; 10];
        let n = encode_varint(z.len() as u64, &mut v);
        let mut out = Vec::with_capacity(2 + n + z.len());
        out.extend_from_slice(&tag);
        out.extend_from_slice(&v[..n]);
        out.extend_from_slice(&z);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::protos::mod_TraceConfig::mod_CompressionConfig::{Deflate, Zstd};
    use crate::pb::protos::mod_TraceConfig::CompressionConfig;
    use crate::protozero::decode::FieldIter;

    /// 100 packets through a sink of `codec`: the one packet it makes,
    /// its field, and that field's bytes decompressed.
    fn one_pass(codec: Codec) -> (u32, Vec<u8>) {
        let mut s = CompressSink::new(codec);
        let data = [1u8, 2, 3, 4, 5];
        let ranges = [(0, 2), (3, 2)];
        for _ in 0..100 {
            assert!(s.packet(&TracePacket::from_ranges(&data, &ranges), &[9, 9]));
        }
        let pkt = s.finish().unwrap();
        let f: Vec<_> = FieldIter::new(&pkt).collect();
        assert_eq!((f.len(), f[0].wire_type), (1, 2));
        let raw = match codec {
            Codec::Deflate => miniz_oxide::inflate::decompress_to_vec_zlib(f[0].value).unwrap(),
            Codec::Zstd(_) => zstd::decompress_with_limit(f[0].value, 1 << 20).unwrap(),
        };
        (f[0].number, raw)
    }

    #[test]
    fn packets_come_back_whole_after_decompressing() {
        for (codec, field) in [
            (Codec::Deflate, 50),
            (Codec::Zstd(0), 133),
            (Codec::Zstd(19), 133),
        ] {
            let (number, raw) = one_pass(codec);
            assert_eq!(number, field, "{codec:?}");
            let inner: Vec<_> = FieldIter::new(&raw).collect();
            assert_eq!(inner.len(), 100);
            assert!(inner
                .iter()
                .all(|p| p.number == 1 && p.value == [1, 2, 4, 5, 9, 9]));
            assert!(CompressSink::new(codec).finish().is_none());
        }
    }

    fn with(deflate: bool, zstd: Option<Option<i32>>, legacy: bool) -> TraceConfig {
        TraceConfig {
            compression: (deflate || zstd.is_some()).then(|| CompressionConfig {
                deflate: deflate.then(Deflate::default),
                zstd: zstd.map(|level| Zstd { level }),
            }),
            compression_type: legacy.then_some(CompressionType::COMPRESSION_TYPE_DEFLATE),
            ..Default::default()
        }
    }

    #[test]
    fn the_highest_numbered_known_codec_wins_then_the_legacy_field() {
        assert_eq!(codec(&TraceConfig::default()), None);
        assert_eq!(codec(&with(false, None, true)), Some(Codec::Deflate));
        assert_eq!(codec(&with(true, None, false)), Some(Codec::Deflate));
        assert_eq!(codec(&with(false, Some(None), false)), Some(Codec::Zstd(0)));
        assert_eq!(
            codec(&with(true, Some(Some(7)), true)),
            Some(Codec::Zstd(7))
        );
        assert_eq!(
            codec(&with(false, Some(Some(-3)), true)),
            Some(Codec::Zstd(-3))
        );
        // `compression {}` names nothing: the legacy field decides.
        let mut c = with(false, None, true);
        c.compression = Some(Default::default());
        assert_eq!(codec(&c), Some(Codec::Deflate));
        c.compression_type = None;
        assert_eq!(codec(&c), None);
    }
}
