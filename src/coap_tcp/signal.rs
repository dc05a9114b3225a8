//! Signalling messages (RFC 8323 §5): codes 7.01 to 7.05, on reliable transports only.
//!
//! Their options are numbered per code (§5.2), so they are read here, not by the engine's
//! option registry. Like other options, odd numbers are critical: a CSM with a critical option
//! we do not know is a protocol error (§5.3), answered with Abort. Unknown elective ones are
//! ignored.

use super::frame::{self, Frame, Framing};
use crate::coap::{error_enum, Code, Message, MessageBuilder, MessageType};

/// Capabilities and Settings Message (§5.3): each end sends one first.
pub const CSM: Code = Code::new(7, 1);
/// Ping (§5.4): answered by Pong with the same token.
pub const PING: Code = Code::new(7, 2);
/// Pong (§5.4).
pub const PONG: Code = Code::new(7, 3);
/// Release (§5.5): the sender will close the connection; no new requests.
pub const RELEASE: Code = Code::new(7, 4);
/// Abort (§5.6): the sender closes the connection at once.
pub const ABORT: Code = Code::new(7, 5);

/// CSM option Max-Message-Size (§5.3.1).
pub const MAX_MESSAGE_SIZE: u16 = 2;
/// CSM option Block-Wise-Transfer (§5.3.2).
const BLOCK_WISE_TRANSFER: u16 = 4;
/// Abort option Bad-CSM-Option (§5.6).
const BAD_CSM_OPTION: u16 = 2;

/// The Max-Message-Size an end has until its CSM says otherwise (§5.3.1).
pub const DEFAULT_MAX_MESSAGE_SIZE: u32 = 1152;

/// The smallest Max-Message-Size a peer may announce (§5.3.1 sets no floor; this is ours).
/// The proxy relays answers as they are and cannot cut them smaller, so a peer that takes
/// less than this would have every answer dropped while it waits for them: its CSM gets an
/// Abort instead (§5.6). 64 bytes hold the smallest block RFC 7959 allows (16 bytes, SZX 0)
/// with its header, an 8-byte token and the options a response carries (ETag,
/// Content-Format, Max-Age, Block2), so a client that asks for small blocks is served.
pub const MIN_MAX_MESSAGE_SIZE: u32 = 64;

/// What one end's CSM announced (§5.3): later CSMs update it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The largest message the end takes.
    pub max_message_size: u32,
    /// Whether it does block-wise transfers (RFC 7959) on this connection.
    pub block_wise: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            block_wise: false,
        }
    }
}

/// A signalling message, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signal {
    /// A CSM: the settings it changes, applied to the ones before.
    Csm(Settings),
    /// A Ping with this token, to be answered by a Pong with it.
    Ping(Vec<u8>),
    /// A Pong.
    Pong,
    /// Release.
    Release,
    /// Abort, with its diagnostic payload.
    Abort(String),
    /// A 7.xx code this end does not know: ignored.
    Unknown,
}

error_enum! {
    /// A signalling message that is a protocol error: the connection is aborted.
    SignalError {
        Malformed => "signalling options are not well formed (RFC 8323 §5.2, RFC 7252 §3.1)",
    }
}

/// Reads a 7.xx frame; `before` are the settings the peer had announced so far. With it, the
/// number of a critical CSM option this end does not know: the CSM must then be refused
/// with Abort naming it (§5.3, §5.6).
pub fn parse(frame: &Frame<'_>, before: Settings) -> Result<(Signal, Option<u16>), SignalError> {
    let mut datagram = Vec::new();
    frame.to_datagram(&mut datagram, MessageType::Con, 0);
    let msg = Message::parse(&datagram).map_err(|_| SignalError::Malformed)?;
    let signal = match frame.code {
        CSM => {
            let mut settings = before;
            for (number, value) in msg.options() {
                match number {
                    MAX_MESSAGE_SIZE => settings.max_message_size = uint(value),
                    BLOCK_WISE_TRANSFER => settings.block_wise = true,
                    n if n % 2 == 1 => return Ok((Signal::Unknown, Some(n))),
                    _ => {}
                }
            }
            Signal::Csm(settings)
        }
        PING => Signal::Ping(frame.token.to_vec()),
        PONG => Signal::Pong,
        RELEASE => Signal::Release,
        ABORT => Signal::Abort(String::from_utf8_lossy(msg.payload()).into_owned()),
        _ => Signal::Unknown,
    };
    Ok((signal, None))
}

/// A uint option value (RFC 7252 §3.2), saturating past 4 bytes.
fn uint(value: &[u8]) -> u32 {
    if value.len() > 4 {
        return u32::MAX;
    }
    value.iter().fold(0, |n, &b| n << 8 | u32::from(b))
}

/// The shortest uint encoding of `n` (RFC 7252 §3.2).
fn uint_bytes(n: u32) -> Vec<u8> {
    let bytes = n.to_be_bytes();
    let skip = bytes.iter().take_while(|&&b| b == 0).count();
    bytes[skip..].to_vec()
}

/// Appends a signal with `code`, `token`, options and diagnostic payload to `out`.
fn encode(
    out: &mut Vec<u8>,
    framing: Framing,
    code: Code,
    token: &[u8],
    options: &[(u16, &[u8])],
    payload: &[u8],
) {
    let mut datagram = Vec::new();
    let mut b = MessageBuilder::new(&mut datagram, MessageType::Con, code, 0, token);
    for &(number, value) in options {
        b.option(number, value);
    }
    b.payload(payload);
    // Numbers below 13, values of at most 4 bytes, a token of at most 8: nothing to fail.
    if b.finish().is_ok() {
        if let Some(f) = frame::from_datagram(&datagram) {
            frame::encode(out, framing, &f);
        }
    }
}

/// Appends our CSM (§5.3) announcing `settings`.
pub fn encode_csm(out: &mut Vec<u8>, framing: Framing, settings: Settings) {
    let size = uint_bytes(settings.max_message_size);
    let mut options: Vec<(u16, &[u8])> = vec![(MAX_MESSAGE_SIZE, &size)];
    if settings.block_wise {
        options.push((BLOCK_WISE_TRANSFER, &[]));
    }
    encode(out, framing, CSM, &[], &options, &[]);
}

/// Appends a Ping (§5.4) with `token`.
pub fn encode_ping(out: &mut Vec<u8>, framing: Framing, token: &[u8]) {
    encode(out, framing, PING, token, &[], &[]);
}

/// Appends the Pong for a Ping with `token` (§5.4).
pub fn encode_pong(out: &mut Vec<u8>, framing: Framing, token: &[u8]) {
    encode(out, framing, PONG, token, &[], &[]);
}

/// Appends a Release (§5.5).
pub fn encode_release(out: &mut Vec<u8>, framing: Framing) {
    encode(out, framing, RELEASE, &[], &[], &[]);
}

/// Appends an Abort (§5.6) saying `why`, naming the CSM option it could not take, if any.
pub fn encode_abort(out: &mut Vec<u8>, framing: Framing, why: &str, bad_option: Option<u16>) {
    let bad = bad_option.map(|n| uint_bytes(u32::from(n)));
    let options: Vec<(u16, &[u8])> = bad.iter().map(|b| (BAD_CSM_OPTION, &b[..])).collect();
    encode(out, framing, ABORT, &[], &options, why.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8]) -> Frame<'_> {
        frame::decode_stream(bytes, usize::MAX).unwrap().unwrap().0
    }

    #[test]
    fn a_csm_round_trips_and_updates_the_settings() {
        let mut out = Vec::new();
        let ours = Settings {
            max_message_size: 8192,
            block_wise: true,
        };
        encode_csm(&mut out, Framing::Stream, ours);
        // Len 5: option 2 of two bytes (0x22 0x20 0x00), option 4 empty (0x20).
        assert_eq!(out, [0x40, 0xe1, 0x22, 0x20, 0x00, 0x20]);
        let (signal, bad) = parse(&read(&out), Settings::default()).unwrap();
        assert_eq!((signal, bad), (Signal::Csm(ours), None));
    }

    #[test]
    fn a_csm_with_an_unknown_critical_option_names_it() {
        // Option 3 (critical), empty.
        let (signal, bad) = parse(&read(&[0x10, 0xe1, 0x30]), Settings::default()).unwrap();
        assert_eq!((signal, bad), (Signal::Unknown, Some(3)));
        // Option 6 (elective): ignored.
        let (signal, _) = parse(&read(&[0x10, 0xe1, 0x60]), Settings::default()).unwrap();
        assert_eq!(signal, Signal::Csm(Settings::default()));
    }

    #[test]
    fn ping_pong_abort_and_release() {
        let mut out = Vec::new();
        encode_ping(&mut out, Framing::Stream, b"ab");
        let (ping, _) = parse(&read(&out), Settings::default()).unwrap();
        assert_eq!(ping, Signal::Ping(b"ab".to_vec()));
        out.clear();
        encode_pong(&mut out, Framing::Stream, b"ab");
        assert_eq!(read(&out).token, b"ab");
        out.clear();
        encode_abort(&mut out, Framing::Stream, "bad CSM", Some(3));
        let (abort, _) = parse(&read(&out), Settings::default()).unwrap();
        assert_eq!(abort, Signal::Abort("bad CSM".into()));
        out.clear();
        encode_release(&mut out, Framing::WebSocket);
        assert_eq!(out, [0x00, 0xe4]);
    }
}
