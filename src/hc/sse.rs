//! CoAP notifications as Server-Sent Events (HTML Living Standard, "Server-sent events",
//! §9.2.5-§9.2.6): one event of the default type per notification, so that a browser's
//! `EventSource.onmessage` receives each.
//!
//! ```text
//! : content-format 50 application/json text
//! id: 7
//! data: {"t": 21.5}
//!
//! ```
//! - `id:` is the notification's Observe value (RFC 7641 §3.4), so `lastEventId` shows it.
//! - `data:` is the payload: as text for text formats (each line its own `data:` line, which
//!   the browser joins with line feeds), as standard base64 (RFC 4648 §4) for binary ones.
//! - The Content-Format rides in a comment line, which every SSE client ignores: an `event:`
//!   line would change the event type, and `onmessage` would no longer see it. Whoever
//!   reads the raw stream (curl) sees the format and whether `data:` is text or base64.

use std::fmt::Write as _;

use super::mapping;

/// The event for a notification with Observe value `seq`, Content-Format `cf` and `payload`.
pub fn event(seq: Option<u32>, cf: Option<u16>, payload: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(payload)
        .ok()
        .filter(|_| cf.is_none() || mapping::is_text(cf));
    let mut out = String::with_capacity(payload.len() * 4 / 3 + 64);
    let media = mapping::response_content_type(cf);
    let encoding = if text.is_some() { "text" } else { "base64" };
    match cf {
        Some(cf) => _ = writeln!(out, ": content-format {cf} {media} {encoding}"),
        None => _ = writeln!(out, ": content-format none {media} {encoding}"),
    }
    if let Some(seq) = seq {
        _ = writeln!(out, "id: {seq}");
    }
    match text {
        Some(text) => data_lines(&mut out, text),
        None => _ = writeln!(out, "data: {}", base64(payload)),
    }
    out.push('\n');
    out.into_bytes()
}

/// One `data:` line per line of `text`: a line break inside a field would end it early.
fn data_lines(out: &mut String, text: &str) {
    let text = text.strip_suffix('\n').unwrap_or(text);
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let _ = writeln!(out, "data: {line}");
    }
}

/// Standard base64 with padding (RFC 4648 §4).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        let sextets = chunk.len() + 1;
        for i in 0..4 {
            match i < sextets {
                true => out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63])),
                false => out.push('='),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_follows_the_rfc_4648_test_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain}");
        }
    }

    #[test]
    fn a_text_notification_is_one_default_event_with_its_observe_value_as_id() {
        let e = String::from_utf8(event(Some(7), Some(0), b"21.5 C")).unwrap();
        assert_eq!(
            e,
            ": content-format 0 text/plain; charset=utf-8 text\nid: 7\ndata: 21.5 C\n\n"
        );
        assert!(!e.contains("event:"), "the default type reaches onmessage");
    }

    #[test]
    fn each_line_of_a_multi_line_payload_is_its_own_data_line() {
        let e = String::from_utf8(event(None, Some(50), b"{\r\n\"a\": 1\n}\n")).unwrap();
        assert!(e.ends_with("data: {\ndata: \"a\": 1\ndata: }\n\n"), "{e}");
    }

    #[test]
    fn a_binary_notification_is_base64() {
        let e = String::from_utf8(event(Some(1), Some(60), &[0xa1, 0x01, 0x02])).unwrap();
        assert!(e.contains("application/cbor base64\n"), "{e}");
        assert!(e.ends_with("data: oQEC\n\n"), "{e}");
    }
}
