//! Compression codecs below the service and the readers: the fields a
//! compressed read pass travels in, and their bounded decompression.
//! zstd goes through [`zstd`], the one wrapper over libzstd.

pub mod zstd;

/// `TracePacket.compressed_packets`: a zlib stream of `Trace.packet`s.
pub const COMPRESSED_PACKETS: u32 = 50;
/// `TracePacket.zstd_compressed_packets`: the same in zstd frames.
pub const ZSTD_COMPRESSED_PACKETS: u32 = 133;

/// Whether `field` of a TracePacket holds compressed packets.
pub fn is_compressed_packets(field: u32) -> bool {
    field == COMPRESSED_PACKETS || field == ZSTD_COMPRESSED_PACKETS
}

/// The `Trace` bytes inside a compressed-packets `field`, or `None` when
/// they are malformed or would decompress past `limit` bytes (refused
/// while decompressing: a bomb is never held in memory).
pub fn decompress_packets(field: u32, bytes_untrusted: &[u8], limit: usize) -> Option<Vec<u8>> {
    match field {
        COMPRESSED_PACKETS => {
            miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(bytes_untrusted, limit).ok()
        }
        ZSTD_COMPRESSED_PACKETS => zstd::decompress_with_limit(bytes_untrusted, limit).ok(),
        _ => None,
    }
}
