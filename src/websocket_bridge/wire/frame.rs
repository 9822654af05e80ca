//! Websocket frames (RFC 6455 section 5) as the server sees them. Pure.
//!
//! [`FrameDecoder`] takes the client's bytes in any chunks and yields
//! [`Event`]s. It enforces the rules a server must:
//! * every client frame is masked; reserved bits are zero (no extension
//!   was negotiated); opcodes are the six defined ones;
//! * control frames (close, ping, pong) have FIN set and at most 125
//!   payload bytes, and may come between the fragments of a message;
//! * a continuation frame continues a message; a text or binary frame
//!   does not interrupt one;
//! * a close frame's status code is one a peer may send (1000-1003,
//!   1007-1014, 3000-4999: not 1005, 1006 or 999, which are for local
//!   use or unassigned), else close 1002;
//! * text messages and close reasons are UTF-8, checked across fragments
//!   (a character may be split between them), else close 1007;
//! * a frame announcing more than `max_payload` bytes is refused as soon
//!   as its header arrives, so the decoder holds at most one frame plus
//!   what the caller pushed since.
//!
//! Data frames are yielded fragment by fragment: the bridge relays a byte
//! stream, so message boundaries need no reassembly (and no message-sized
//! buffer). After a close or an error the decoder yields nothing more.

/// Opcodes (RFC 6455 section 5.2).
pub const OP_CONTINUATION: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

/// Close status codes used by the bridge (RFC 6455 section 7.4.1).
pub const CLOSE_NORMAL: u16 = 1000;
pub const CLOSE_GOING_AWAY: u16 = 1001;
pub const CLOSE_PROTOCOL_ERROR: u16 = 1002;
pub const CLOSE_INVALID_PAYLOAD: u16 = 1007;
pub const CLOSE_TOO_BIG: u16 = 1009;

/// Longest header: 2 bytes, 8 of extended length, 4 of mask.
pub const MAX_HEADER: usize = 14;

/// What a client frame means to the bridge.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// Unmasked payload of a text, binary or continuation frame.
    Data(Vec<u8>),
    /// A ping; answer with a pong carrying the same payload.
    Ping(Vec<u8>),
    /// A pong (unsolicited ones are allowed and ignored).
    Pong,
    /// The client closes; `code` is its status code if it sent one.
    Close { code: Option<u16> },
}

/// A violation; the connection must be closed with [`close_code`](Self::close_code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Broke a framing rule; the text says which.
    Protocol(&'static str),
    /// A frame announced more payload than allowed.
    TooBig { len_untrusted: u64 },
    /// A text message or a close reason that is not UTF-8.
    InvalidPayload(&'static str),
}

impl FrameError {
    /// The status code for the close frame sent in reply.
    pub fn close_code(self) -> u16 {
        match self {
            FrameError::Protocol(_) => CLOSE_PROTOCOL_ERROR,
            FrameError::TooBig { .. } => CLOSE_TOO_BIG,
            FrameError::InvalidPayload(_) => CLOSE_INVALID_PAYLOAD,
        }
    }
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Protocol(why) => write!(f, "websocket protocol error: {why}"),
            FrameError::TooBig { len_untrusted } => {
                write!(f, "websocket frame of {len_untrusted} bytes is too big")
            }
            FrameError::InvalidPayload(why) => write!(f, "websocket payload error: {why}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Incremental decoder of client frames.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    max_payload: usize,
    in_message: bool,
    /// The message in progress is text: its bytes must be UTF-8.
    text: bool,
    /// The incomplete character a text fragment ended with (at most 3
    /// bytes), completed by the next fragment.
    utf8_tail: Vec<u8>,
    /// A close arrived: nothing more is decoded.
    done: bool,
    error: Option<FrameError>,
}

impl FrameDecoder {
    /// A decoder refusing frames with more than `max_payload` bytes.
    pub fn new(max_payload: usize) -> Self {
        FrameDecoder {
            buf: Vec::new(),
            max_payload,
            in_message: false,
            text: false,
            utf8_tail: Vec::new(),
            done: false,
            error: None,
        }
    }

    /// Appends bytes read from the client.
    pub fn push(&mut self, data: &[u8]) {
        if !self.done && self.error.is_none() {
            self.buf.extend_from_slice(data);
        }
    }

    /// Bytes held that are not yet a whole frame.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next event, `Ok(None)` if more bytes are needed (or after a
    /// close). After an error every call fails the same way.
    pub fn next_event(&mut self) -> Result<Option<Event>, FrameError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.done {
            return Ok(None);
        }
        match self.parse() {
            Err(e) => {
                self.error = Some(e);
                self.buf = Vec::new();
                Err(e)
            }
            Ok(ev) => {
                if matches!(ev, Some(Event::Close { .. })) {
                    self.done = true;
                    self.buf = Vec::new();
                }
                Ok(ev)
            }
        }
    }

    fn parse(&mut self) -> Result<Option<Event>, FrameError> {
        let b = &self.buf;
        if b.len() < 2 {
            return Ok(None);
        }
        let fin = b[0] & 0x80 != 0;
        if b[0] & 0x70 != 0 {
            return Err(FrameError::Protocol("reserved bits set"));
        }
        let opcode = b[0] & 0x0f;
        if b[1] & 0x80 == 0 {
            return Err(FrameError::Protocol("client frame not masked"));
        }
        let is_control = opcode & 0x8 != 0;
        match opcode {
            OP_CONTINUATION if !self.in_message => {
                return Err(FrameError::Protocol("continuation outside a message"))
            }
            OP_TEXT | OP_BINARY if self.in_message => {
                return Err(FrameError::Protocol("new message inside a fragmented one"))
            }
            OP_CONTINUATION | OP_TEXT | OP_BINARY | OP_CLOSE | OP_PING | OP_PONG => {}
            _ => return Err(FrameError::Protocol("unknown opcode")),
        }
        let (len_untrusted, mut pos) = match b[1] & 0x7f {
            126 if b.len() >= 4 => (u64::from(u16::from_be_bytes([b[2], b[3]])), 4),
            127 if b.len() >= 10 => (u64::from_be_bytes(b[2..10].try_into().unwrap()), 10),
            126 | 127 => return Ok(None),
            n => (u64::from(n), 2),
        };
        if is_control && (!fin || len_untrusted > 125) {
            return Err(FrameError::Protocol("fragmented or long control frame"));
        }
        if len_untrusted > self.max_payload as u64 {
            return Err(FrameError::TooBig { len_untrusted });
        }
        let len = len_untrusted as usize;
        if b.len() < pos + 4 + len {
            return Ok(None);
        }
        let mask = [b[pos], b[pos + 1], b[pos + 2], b[pos + 3]];
        pos += 4;
        let mut payload: Vec<u8> = self.buf.drain(..pos + len).skip(pos).collect();
        for (i, byte) in payload.iter_mut().enumerate() {
            *byte ^= mask[i & 3];
        }
        Ok(Some(match opcode {
            OP_PING => Event::Ping(payload),
            OP_PONG => Event::Pong,
            OP_CLOSE => match payload.len() {
                0 => Event::Close { code: None },
                1 => return Err(FrameError::Protocol("close payload of one byte")),
                _ => {
                    let code_untrusted = u16::from_be_bytes([payload[0], payload[1]]);
                    if !close_code_valid(code_untrusted) {
                        return Err(FrameError::Protocol("invalid close code"));
                    }
                    if std::str::from_utf8(&payload[2..]).is_err() {
                        return Err(FrameError::InvalidPayload("close reason is not UTF-8"));
                    }
                    Event::Close {
                        code: Some(code_untrusted),
                    }
                }
            },
            _ => {
                if opcode != OP_CONTINUATION {
                    self.text = opcode == OP_TEXT;
                }
                if self.text {
                    check_utf8(&mut self.utf8_tail, &payload, fin)?;
                }
                self.in_message = !fin;
                Event::Data(payload)
            }
        }))
    }
}

/// Status codes a peer may send in a close frame (RFC 6455 section 7.4 and
/// IANA's registry): not 1004-1006 or 1015 (reserved, or for local use
/// only), nor anything unassigned.
pub fn close_code_valid(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// Checks a text fragment that continues a message whose previous one
/// ended with the incomplete character `tail`; leaves in `tail` the
/// incomplete character this one ends with (none allowed on the last).
fn check_utf8(tail: &mut Vec<u8>, data_untrusted: &[u8], last: bool) -> Result<(), FrameError> {
    let joined;
    let bytes = if tail.is_empty() {
        data_untrusted
    } else {
        joined = [std::mem::take(tail).as_slice(), data_untrusted].concat();
        &joined
    };
    match std::str::from_utf8(bytes) {
        Ok(_) => Ok(()),
        // Cut short at the end (at most 3 bytes): the next fragment goes on.
        Err(e) if e.error_len().is_none() && !last => {
            tail.extend_from_slice(&bytes[e.valid_up_to()..]);
            Ok(())
        }
        Err(_) => Err(FrameError::InvalidPayload("text message is not UTF-8")),
    }
}

/// Appends an unmasked server frame with FIN set.
pub fn put_frame(out: &mut Vec<u8>, opcode: u8, payload: &[u8]) {
    put_header(out, opcode, payload.len());
    out.extend_from_slice(payload);
}

/// Appends the header of an unmasked server frame with FIN set whose
/// `len` payload bytes the caller appends next.
pub fn put_header(out: &mut Vec<u8>, opcode: u8, len: usize) {
    out.push(0x80 | opcode);
    if len < 126 {
        out.push(len as u8);
    } else if len <= u16::MAX as usize {
        out.push(126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
}

/// Appends a close frame carrying `code`.
pub fn put_close(out: &mut Vec<u8>, code: u16) {
    put_frame(out, OP_CLOSE, &code.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client frame: masked with a fixed key.
    fn client(first: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        let mut out = vec![first];
        let n = payload.len();
        if n < 126 {
            out.push(0x80 | n as u8);
        } else if n <= 0xffff {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        out
    }

    fn events(bytes: &[u8], max: usize) -> (Vec<Event>, Option<FrameError>) {
        let mut d = FrameDecoder::new(max);
        let mut out = Vec::new();
        // One byte at a time: every split point must work.
        for b in bytes {
            d.push(&[*b]);
            loop {
                match d.next_event() {
                    Ok(Some(e)) => out.push(e),
                    Ok(None) => break,
                    Err(e) => return (out, Some(e)),
                }
            }
        }
        (out, None)
    }

    #[test]
    fn rfc_6455_masked_hello_example() {
        let frame = [
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        let (ev, err) = events(&frame, 1024);
        assert_eq!((ev, err), (vec![Event::Data(b"Hello".to_vec())], None));
    }

    #[test]
    fn fragments_with_interleaved_control_frames() {
        let mut s = client(0x02, b"ab"); // binary, no FIN
        s.extend(client(0x89, b"hi")); // ping between fragments
        s.extend(client(0x00, b"cd")); // continuation, no FIN
        s.extend(client(0x8a, b"")); // pong
        s.extend(client(0x80, b"ef")); // last continuation
        s.extend(client(0x81, b"text")); // a new message may start now
        s.extend(client(0x88, &1000u16.to_be_bytes()));
        s.extend(client(0x82, b"ignored after close"));
        let (ev, err) = events(&s, 1024);
        assert_eq!(err, None);
        assert_eq!(
            ev,
            vec![
                Event::Data(b"ab".to_vec()),
                Event::Ping(b"hi".to_vec()),
                Event::Data(b"cd".to_vec()),
                Event::Pong,
                Event::Data(b"ef".to_vec()),
                Event::Data(b"text".to_vec()),
                Event::Close { code: Some(1000) },
            ]
        );
    }

    #[test]
    fn extended_lengths_and_the_size_limit() {
        for n in [125, 126, 65535, 65536, 70000] {
            let payload: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let (ev, err) = events(&client(0x82, &payload), 70000);
            assert_eq!((ev, err), (vec![Event::Data(payload)], None), "{n}");
        }
        // Refused on the header alone, before the payload arrives.
        let frame = client(0x82, &[0; 70001]);
        let mut d = FrameDecoder::new(70000);
        d.push(&frame[..14]);
        assert_eq!(
            d.next_event(),
            Err(FrameError::TooBig {
                len_untrusted: 70001
            })
        );
        assert_eq!(d.next_event().unwrap_err().close_code(), CLOSE_TOO_BIG);
        let huge = [0x82, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            events(&huge, 10).1,
            Some(FrameError::TooBig { .. })
        ));
    }

    #[test]
    fn protocol_violations() {
        let unmasked = vec![0x82, 0x01, 0x00];
        let cases = [
            unmasked,
            client(0xc2, b"x"),                                // RSV1
            client(0x83, b"x"),                                // reserved data opcode
            client(0x8b, b"x"),                                // reserved control opcode
            client(0x80, b"x"),                                // continuation with no message
            [client(0x02, b"a"), client(0x82, b"b")].concat(), // interrupted message
            client(0x09, b"x"),                                // fragmented ping
            client(0x89, &[0; 126]),                           // long ping
            client(0x88, &[3]),                                // one-byte close payload
        ];
        for c in cases {
            let (_, err) = events(&c, 1024);
            let err = err.unwrap_or_else(|| panic!("accepted {c:x?}"));
            assert_eq!(err.close_code(), CLOSE_PROTOCOL_ERROR, "{c:x?}");
        }
    }

    /// Issue 33: close codes a peer may not send are answered with 1002;
    /// text and close reasons that are not UTF-8 with 1007.
    #[test]
    fn close_codes_and_utf8_are_checked() {
        for code in [
            0u16, 999, 1004, 1005, 1006, 1015, 1016, 2000, 2999, 5000, 65535,
        ] {
            let (ev, err) = events(&client(0x88, &code.to_be_bytes()), 1024);
            assert!(ev.is_empty(), "{code}");
            assert_eq!(
                err.map(FrameError::close_code),
                Some(CLOSE_PROTOCOL_ERROR),
                "{code}"
            );
        }
        for code in [1000u16, 1001, 1002, 1003, 1007, 1011, 1014, 3000, 4999] {
            let (ev, err) = events(&client(0x88, &code.to_be_bytes()), 1024);
            assert_eq!((ev, err), (vec![Event::Close { code: Some(code) }], None));
        }
        let bad_reason = [&1000u16.to_be_bytes()[..], &[0xce, 0xba, 0xff]].concat();
        let good_reason = [&1000u16.to_be_bytes()[..], "κόσμε".as_bytes()].concat();
        assert_eq!(
            events(&client(0x88, &bad_reason), 1024)
                .1
                .map(FrameError::close_code),
            Some(CLOSE_INVALID_PAYLOAD)
        );
        assert_eq!(events(&client(0x88, &good_reason), 1024).1, None);
        // Text: a character split across fragments is fine; a bad byte, a
        // character left incomplete at the end, or an overlong form is not.
        let euro = "€".as_bytes(); // e2 82 ac
        let split = [
            client(0x01, &[b'a', euro[0]]),
            client(0x89, b"p"),
            client(0x00, &euro[1..2]),
            client(0x80, &[euro[2], b'b']),
        ]
        .concat();
        let (ev, err) = events(&split, 1024);
        assert_eq!((ev.len(), err), (4, None));
        for bad in [
            client(0x81, &[0xff]),
            client(0x81, &[b'a', euro[0], euro[1]]),
            [client(0x01, &euro[..2]), client(0x80, b"")].concat(),
            client(0x81, &[0xc0, 0xaf]),
            client(0x81, &[0xed, 0xa0, 0x80]), // a surrogate
        ] {
            let err = events(&bad, 1024).1;
            assert_eq!(
                err.map(FrameError::close_code),
                Some(CLOSE_INVALID_PAYLOAD),
                "{bad:x?}"
            );
        }
        // Binary messages carry any bytes.
        assert_eq!(events(&client(0x82, &[0xff]), 1024).1, None);
    }

    #[test]
    fn server_frames_are_unmasked_with_minimal_lengths() {
        let mut out = Vec::new();
        put_frame(&mut out, OP_BINARY, b"Hello");
        assert_eq!(out, [0x82, 0x05, b'H', b'e', b'l', b'l', b'o']);
        for (n, header) in [(126usize, 4usize), (65535, 4), (65536, 10)] {
            let mut out = Vec::new();
            put_header(&mut out, OP_BINARY, n);
            assert_eq!(out.len(), header, "{n}");
        }
        let mut out = Vec::new();
        put_close(&mut out, CLOSE_GOING_AWAY);
        assert_eq!(out, [0x88, 0x02, 0x03, 0xe9]);
    }
}
