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
use crate::base64::base64;

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

/// One `data:` line per line of `text`: a line break inside a field would end it early, and
/// what follows it would be read as a field of its own (`id:`, `retry:`, `event:`, or a blank
/// line that dispatches an event). So `text` is split where an event stream ends a line: at
/// CRLF, a lone LF and a lone CR alike (WHATWG HTML, "event stream interpretation").
fn data_lines(out: &mut String, text: &str) {
    let text = (text.strip_suffix("\r\n"))
        .or_else(|| text.strip_suffix(['\n', '\r']))
        .unwrap_or(text);
    for line in stream_lines(text) {
        let _ = writeln!(out, "data: {line}");
    }
}

/// The lines of `text` as an event stream reads them: each ends at CRLF, LF or CR.
fn stream_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let r = rest?;
        let Some(end) = r.find(['\r', '\n']) else {
            rest = None;
            return Some(r);
        };
        let next = match r[end..].starts_with("\r\n") {
            true => end + 2,
            false => end + 1,
        };
        rest = Some(&r[next..]);
        Some(&r[..end])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// An event stream parser as the WHATWG HTML standard specifies one ("event stream
    /// interpretation"): lines end at CRLF, LF or CR; `data` is joined by LF; a blank line
    /// dispatches. Returns the events as (type, id, data), and the last `retry`.
    fn parse_stream(stream: &str) -> (Vec<(String, String, String)>, Option<String>) {
        let (mut events, mut retry) = (Vec::new(), None);
        let (mut kind, mut id, mut data) = (String::new(), String::new(), String::new());
        for line in stream_lines(stream) {
            if line.is_empty() {
                if !data.is_empty() {
                    data.pop();
                    let kind = std::mem::take(&mut kind);
                    events.push((kind, id.clone(), std::mem::take(&mut data)));
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => kind = value.to_string(),
                "data" => data.push_str(&format!("{value}\n")),
                "id" => id = value.to_string(),
                "retry" => retry = Some(value.to_string()),
                _ => {}
            }
        }
        (events, retry)
    }

    #[test]
    fn a_payload_with_bare_crs_cannot_inject_fields_or_events() {
        // Issue 25, finding 4: 5 such notifications gave a spec parser 10 events, of type
        // `admin`, id 999 and a 24 h reconnection delay.
        let payload = b"temp=21\rid: 999\rretry: 86400000\revent: admin\r\rdata: forged-event";
        let stream: String = (1..=5)
            .map(|seq| String::from_utf8(event(Some(seq), Some(0), payload)).unwrap())
            .collect();
        let (events, retry) = parse_stream(&stream);
        assert_eq!(events.len(), 5, "{stream}");
        assert_eq!(retry, None);
        for (seq, (kind, id, data)) in (1..=5).zip(&events) {
            assert_eq!((kind.as_str(), id.as_str()), ("", seq.to_string().as_str()));
            let lines = "temp=21\nid: 999\nretry: 86400000\nevent: admin\n\ndata: forged-event";
            assert_eq!(data, lines, "the payload's lines, as data");
        }
    }

    #[test]
    fn every_line_end_splits_and_one_trailing_one_goes() {
        let lines = |t| stream_lines(t).collect::<Vec<_>>();
        assert_eq!(lines("a\r\nb\nc\rd"), ["a", "b", "c", "d"]);
        assert_eq!(lines("a\r\rb"), ["a", "", "b"]);
        let e = String::from_utf8(event(None, Some(0), b"x\r")).unwrap();
        assert!(e.ends_with("data: x\n\n"), "{e}");
    }

    #[test]
    fn a_binary_notification_is_base64() {
        let e = String::from_utf8(event(Some(1), Some(60), &[0xa1, 0x01, 0x02])).unwrap();
        assert!(e.contains("application/cbor base64\n"), "{e}");
        assert!(e.ends_with("data: oQEC\n\n"), "{e}");
    }
}
