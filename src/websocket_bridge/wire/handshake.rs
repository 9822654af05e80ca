//! The HTTP/1.1 side of the bridge: parsing one request head and deciding
//! whether it becomes a websocket (RFC 6455 section 4.2) or gets an error
//! response. Pure: bytes in, bytes out.
//!
//! Rules, in order (upstream's HTTP server behaves the same way where it
//! has a rule):
//! 1. a head over [`MAX_HEAD_BYTES`] or with more than [`MAX_HEADERS`]
//!    headers is `431`; one that does not parse, or that has two `Origin`,
//!    `Sec-WebSocket-Key` or `Sec-WebSocket-Version` headers (which one
//!    would count is ambiguous), is `400`;
//! 2. an `Origin` that is present and not allowed is `403` (CSRF defence);
//! 3. a path that is not an endpoint, or a request that is not a `GET`
//!    with `Upgrade: websocket`, is `404`;
//! 4. a websocket without an `Origin` is `403` (browsers always send one);
//! 5. `Sec-WebSocket-Version` other than 13 is `426` naming 13;
//! 6. a `Sec-WebSocket-Key` that is not base64 of 16 bytes is `400`.
//!
//! Origins compare case-insensitively and exactly (scheme, host, port).

use super::{base64, sha1::sha1};

/// Longest request head (request line and headers) accepted.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;
/// Most headers accepted in one request.
pub const MAX_HEADERS: usize = 64;
/// RFC 6455's fixed GUID appended to the key before hashing.
const WS_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// A parsed request head; strings borrow from the input.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: Vec<(&'a str, &'a str)>,
}

impl Request<'_> {
    /// First header named `name` (case-insensitive), value trimmed.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

/// Why a request head was refused before routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Over [`MAX_HEAD_BYTES`] or [`MAX_HEADERS`].
    TooLarge,
    /// Not an HTTP/1.1 request head; the text says which part.
    Malformed(&'static str),
}

impl HeadError {
    /// The response to send before closing.
    pub fn response(self) -> Vec<u8> {
        match self {
            HeadError::TooLarge => error_response("431 Request Header Fields Too Large", "", ""),
            HeadError::Malformed(why) => error_response("400 Bad Request", "", why),
        }
    }
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeadError::TooLarge => write!(f, "request head too large"),
            HeadError::Malformed(why) => write!(f, "malformed request: {why}"),
        }
    }
}

/// Parses the head at the start of `buf_untrusted`. `Ok(None)` means more
/// bytes are needed; `Ok(Some((req, n)))` means the head is
/// `buf_untrusted[..n]` (bytes after it belong to the websocket).
pub fn parse_request(buf_untrusted: &[u8]) -> Result<Option<(Request<'_>, usize)>, HeadError> {
    let window = &buf_untrusted[..buf_untrusted.len().min(MAX_HEAD_BYTES)];
    let Some(end) = find(window, b"\r\n\r\n") else {
        if window.len() == MAX_HEAD_BYTES {
            return Err(HeadError::TooLarge);
        }
        return Ok(None);
    };
    let head_len = end + 4;
    let text = std::str::from_utf8(&buf_untrusted[..end])
        .ok()
        .filter(|t| t.is_ascii())
        .ok_or(HeadError::Malformed("non-ASCII bytes in the request head"))?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed("bad request line"));
    };
    if method.is_empty() || !path.starts_with('/') || version != "HTTP/1.1" {
        return Err(HeadError::Malformed("bad request line"));
    }
    let mut headers = Vec::new();
    for line in lines {
        if headers.len() == MAX_HEADERS {
            return Err(HeadError::TooLarge);
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(HeadError::Malformed("bad header line"));
        };
        // A token: no spaces (which also rules out obsolete line folding).
        if name.is_empty() || name.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(HeadError::Malformed("bad header name"));
        }
        if value.bytes().any(|b| b < b' ' && b != b'\t') {
            return Err(HeadError::Malformed("control character in a header"));
        }
        headers.push((name, value.trim_matches([' ', '\t'])));
    }
    Ok(Some((
        Request {
            method,
            path,
            headers,
        },
        head_len,
    )))
}

/// Headers a request may carry once, and the refusal for two.
const SINGLE_HEADERS: [(&str, &str); 3] = [
    ("origin", "two Origin headers"),
    ("sec-websocket-key", "two Sec-WebSocket-Key headers"),
    ("sec-websocket-version", "two Sec-WebSocket-Version headers"),
];

/// What to do with a parsed request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Upgrade: connect `endpoint` (an index into the paths given to
    /// [`decide`]) and then send `response`.
    Upgrade { endpoint: usize, response: Vec<u8> },
    /// Send `response` and close; `why` is for the log.
    Refuse {
        response: Vec<u8>,
        why: &'static str,
    },
}

/// Applies the module's rules to `req`. `paths` are the endpoints' paths,
/// `origins` the allowlist.
pub fn decide(req: &Request<'_>, paths: &[&str], origins: &[String]) -> Verdict {
    let refuse = |status: &str, extra: &str, why: &'static str| Verdict::Refuse {
        response: error_response(status, extra, why),
        why,
    };
    for (name, why) in SINGLE_HEADERS {
        let n = req
            .headers
            .iter()
            .filter(|(h, _)| h.eq_ignore_ascii_case(name));
        if n.count() > 1 {
            return refuse("400 Bad Request", "", why);
        }
    }
    let origin_untrusted = req.header("origin");
    let allowed =
        origin_untrusted.is_some_and(|o| origins.iter().any(|a| a.eq_ignore_ascii_case(o)));
    if origin_untrusted.is_some() && !allowed {
        return refuse("403 Forbidden", "", "origin not allowed");
    }
    let upgrade = req.method == "GET"
        && req
            .header("upgrade")
            .is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
    let Some(endpoint) = paths
        .iter()
        .position(|p| *p == req.path)
        .filter(|_| upgrade)
    else {
        return refuse("404 Not Found", "", "not a websocket endpoint");
    };
    if !allowed {
        return refuse("403 Forbidden", "", "websocket without an Origin");
    }
    if req.header("sec-websocket-version") != Some("13") {
        return refuse(
            "426 Upgrade Required",
            "Sec-WebSocket-Version: 13\r\n",
            "unsupported websocket version",
        );
    }
    let key_untrusted = req.header("sec-websocket-key").unwrap_or("");
    if base64::decode(key_untrusted).map(|k| k.len()) != Some(16) {
        return refuse("400 Bad Request", "", "bad Sec-WebSocket-Key");
    }
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        accept_key(key_untrusted)
    );
    Verdict::Upgrade {
        endpoint,
        response: response.into_bytes(),
    }
}

/// `Sec-WebSocket-Accept` for a client's key.
pub fn accept_key(key: &str) -> String {
    let mut s = String::with_capacity(key.len() + WS_GUID.len());
    s.push_str(key);
    s.push_str(WS_GUID);
    base64::encode(&sha1(s.as_bytes()))
}

/// A complete response that closes the connection; `extra` is whole
/// header lines, `body` a short plain-text reason.
pub fn error_response(status: &str, extra: &str, body: &str) -> Vec<u8> {
    let body = if body.is_empty() { status } else { body };
    format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}\n",
        body.len() + 1
    )
    .into_bytes()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATHS: &[&str] = &["/traced", "/adb"];

    fn origins() -> Vec<String> {
        vec!["https://ui.perfetto.dev".into()]
    }

    fn head(path: &str, extra: &str) -> String {
        format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:8037\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra}\r\n"
        )
    }

    fn verdict(text: &str) -> Verdict {
        let (req, n) = parse_request(text.as_bytes()).unwrap().unwrap();
        assert_eq!(n, text.len());
        decide(&req, PATHS, &origins())
    }

    fn status(v: &Verdict) -> String {
        let r = match v {
            Verdict::Upgrade { response, .. } | Verdict::Refuse { response, .. } => response,
        };
        String::from_utf8_lossy(&r[9..12]).into_owned()
    }

    #[test]
    fn rfc_6455_example_accept_key() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn upgrades_an_allowed_origin_on_each_endpoint() {
        let ok = "Origin: HTTPS://UI.perfetto.dev\r\nSec-WebSocket-Version: 13\r\n";
        let v = verdict(&head("/adb", ok));
        let Verdict::Upgrade { endpoint, response } = v else {
            panic!("{v:?}")
        };
        assert_eq!(endpoint, 1);
        let text = String::from_utf8(response).unwrap();
        assert!(text.starts_with("HTTP/1.1 101 "), "{text}");
        assert!(text.contains("\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
        assert!(matches!(
            verdict(&head("/traced", ok)),
            Verdict::Upgrade { endpoint: 0, .. }
        ));
    }

    #[test]
    fn refusals_follow_the_rules_in_order() {
        let v13 = "Sec-WebSocket-Version: 13\r\n";
        let good = "Origin: https://ui.perfetto.dev\r\n";
        let cases = [
            (
                head("/traced", &format!("Origin: https://evil.example\r\n{v13}")),
                "403",
            ),
            (
                head("/nope", &format!("Origin: https://evil.example\r\n{v13}")),
                "403",
            ),
            (head("/nope", &format!("{good}{v13}")), "404"),
            (head("/traced/", &format!("{good}{v13}")), "404"),
            (head("/traced", v13), "403"),
            (
                head("/traced", &format!("{good}Sec-WebSocket-Version: 8\r\n")),
                "426",
            ),
            (head("/traced", good), "426"),
            (
                format!("GET /traced HTTP/1.1\r\n{good}{v13}Upgrade: websocket\r\n\r\n"),
                "400",
            ),
            (
                head("/traced", &format!("{good}{v13}"))
                    .replace("dGhlIHNhbXBsZSBub25jZQ==", "dGhlIHNhbXBsZQ=="),
                "400",
            ),
            (
                head("/traced", &format!("{good}{v13}")).replace("GET", "POST"),
                "404",
            ),
            (format!("GET /traced HTTP/1.1\r\n{good}{v13}\r\n"), "404"),
            // Issue 33: a second Origin (allowed or not, either order), key
            // or version is refused, not resolved to the first.
            (head("/traced", &format!("{good}{good}{v13}")), "400"),
            (
                head(
                    "/traced",
                    &format!("Origin: https://evil.example\r\n{good}{v13}"),
                ),
                "400",
            ),
            (
                head(
                    "/traced",
                    &format!("{good}Origin: https://evil.example\r\n{v13}"),
                ),
                "400",
            ),
            (head("/traced", &format!("{good}{v13}{v13}")), "400"),
            (
                head(
                    "/traced",
                    &format!("{good}{v13}Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n"),
                ),
                "400",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(status(&verdict(&text)), want, "{text}");
        }
    }

    #[test]
    fn head_parsing_limits_and_errors() {
        assert_eq!(parse_request(b"GET / HTTP/1.1\r\nHost: x\r\n"), Ok(None));
        let (req, n) = parse_request(b"GET /a HTTP/1.1\r\nA:  b \r\n\r\nXYZ")
            .unwrap()
            .unwrap();
        assert_eq!((req.path, req.header("a"), n), ("/a", Some("b"), 27));
        for bad in [
            &b"GET /a HTTP/1.0\r\n\r\n"[..],
            b"GET a HTTP/1.1\r\n\r\n",
            b"GET /a  HTTP/1.1\r\n\r\n",
            b"GET /a HTTP/1.1\r\nNoColon\r\n\r\n",
            b"GET /a HTTP/1.1\r\n folded: x\r\n\r\n",
            b"GET /a HTTP/1.1\r\nA: \xc3\xa9\r\n\r\n",
            b"GET /a HTTP/1.1\r\nA: b\x01\r\n\r\n",
        ] {
            assert!(
                matches!(parse_request(bad), Err(HeadError::Malformed(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = vec![b'a'; MAX_HEAD_BYTES];
        assert_eq!(parse_request(&long), Err(HeadError::TooLarge));
        let many: String = (0..=MAX_HEADERS).map(|i| format!("H{i}: v\r\n")).collect();
        let text = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(parse_request(text.as_bytes()), Err(HeadError::TooLarge));
        assert!(HeadError::TooLarge.response().starts_with(b"HTTP/1.1 431 "));
    }
}
