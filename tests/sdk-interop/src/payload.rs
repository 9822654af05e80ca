//! The test packets the SDK producer writes and the checker verifies.
//!
//! Each packet is a TracePacket with only `for_testing` (field 900), a
//! TestEvent holding:
//!   str (1)       = `size` printable bytes, a pure function of (thread, seq)
//!   seq_value (2) = seq, 0-based per writer thread
//!   counter (3)   = thread index
//!   is_last (4)   = true on the thread's last packet
//! Every thread has its own TraceWriter, hence its own packet sequence.

pub const TRACE_PACKET_FIELD: u32 = 1; // Trace.packet
pub const FOR_TESTING_FIELD: u32 = 900; // TracePacket.for_testing
pub const TRUSTED_UID_FIELD: u32 = 3; // TracePacket.trusted_uid
pub const TRUSTED_SEQ_ID_FIELD: u32 = 10; // TracePacket.trusted_packet_sequence_id
pub const TRUSTED_PID_FIELD: u32 = 79; // TracePacket.trusted_pid
pub const FIRST_PACKET_ON_SEQUENCE_FIELD: u32 = 87; // TracePacket.first_packet_on_sequence
pub const TRACE_STATS_FIELD: u32 = 35; // TracePacket.trace_stats
pub const PREVIOUS_PACKET_DROPPED_FIELD: u32 = 42; // TracePacket.previous_packet_dropped
pub const TEST_EVENT_STR: u32 = 1;
pub const TEST_EVENT_SEQ_VALUE: u32 = 2;
pub const TEST_EVENT_COUNTER: u32 = 3;
pub const TEST_EVENT_IS_LAST: u32 = 4;

const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `out` with the payload of packet `seq` of writer `thread`.
pub fn fill_payload(thread: u32, seq: u32, out: &mut [u8]) {
    let mut state = (u64::from(thread) << 32) | u64::from(seq);
    for chunk in out.chunks_mut(8) {
        let r = splitmix64(&mut state);
        for (i, b) in chunk.iter_mut().enumerate() {
            *b = ALPHABET[((r >> (i * 8)) & 0xff) as usize % ALPHABET.len()];
        }
    }
}

pub fn payload(thread: u32, seq: u32, size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size];
    fill_payload(thread, seq, &mut v);
    v
}

/// Encoded size of a varint.
pub fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Size of the TestEvent as the checker re-encodes it (minimal varints).
/// The SDK writes nested lengths as 4-byte redundant varints, so on the wire
/// each TracePacket is a little larger; see `packet_wire_size`.
pub fn test_event_size(thread: u32, seq: u32, size: usize, is_last: bool) -> usize {
    1 + varint_len(size as u64)
        + size
        + 1
        + varint_len(u64::from(seq))
        + 1
        + varint_len(u64::from(thread))
        + if is_last { 2 } else { 0 }
}

/// Bytes of one TracePacket as the SDK writes it (for_testing tag is 2 bytes,
/// its length a 4-byte redundant varint).
pub fn packet_wire_size(thread: u32, seq: u32, size: usize, is_last: bool) -> usize {
    2 + 4 + test_event_size(thread, seq, size, is_last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_distinct() {
        assert_eq!(payload(1, 7, 100), payload(1, 7, 100));
        assert_ne!(payload(1, 7, 100), payload(1, 8, 100));
        assert_ne!(payload(0, 7, 100), payload(1, 7, 100));
        // A shorter payload is a prefix of a longer one.
        assert_eq!(payload(3, 9, 13)[..], payload(3, 9, 40)[..13]);
        assert!(payload(2, 2, 4096).iter().all(|b| ALPHABET.contains(b)));
    }

    #[test]
    fn sizes() {
        assert_eq!(varint_len(0), 1);
        assert_eq!(varint_len(127), 1);
        assert_eq!(varint_len(128), 2);
        assert_eq!(test_event_size(0, 0, 16, false), 1 + 1 + 16 + 2 + 2);
    }
}
