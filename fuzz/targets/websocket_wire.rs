//! The websocket bridge's parsers of client bytes: the HTTP request head
//! (and the upgrade decision) and the frame decoder, fed in chunks whose
//! sizes the first byte picks. Errors are fine; panics, hangs and
//! unbounded buffering are not.

use tracebox::websocket_bridge::wire::frame::FrameDecoder;
use tracebox::websocket_bridge::wire::handshake::{decide, parse_request, MAX_HEAD_BYTES};

const MAX_PAYLOAD: usize = 4096;

pub fn run(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let origins = vec!["https://ui.perfetto.dev".to_string()];
    if let Ok(Some((req, used))) = parse_request(rest) {
        assert!(used <= rest.len() && used <= MAX_HEAD_BYTES);
        let _ = decide(&req, &["/traced", "/adb"], &origins);
    }
    let chunk = usize::from(sel % 16) + 1;
    let mut dec = FrameDecoder::new(MAX_PAYLOAD);
    for part in rest.chunks(chunk) {
        dec.push(part);
        loop {
            match dec.next_event() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return,
            }
        }
        // At most one frame (header + payload) plus one chunk is held.
        assert!(dec.buffered() <= MAX_PAYLOAD + 14 + chunk);
    }
}
