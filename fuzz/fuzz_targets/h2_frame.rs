//! A byte stream cut into frames: decode never panics and always makes progress or asks for
//! more input.
#![no_main]

use backoffd::http2::frame::{decode, FrameHeader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buf = data;
    loop {
        match decode(buf, 16_384) {
            Ok(Some((_, used))) => {
                assert!(used > 0 && used <= buf.len());
                buf = &buf[used..];
            }
            Ok(None) => return,
            Err(e) if e.code().0 != 0 => {
                // A stream error leaves a whole frame to skip; a connection error ends it.
                match FrameHeader::parse(buf) {
                    Some(h) if matches!(e, backoffd::http2::error::H2Error::Stream { .. }) => {
                        buf = &buf[h.frame_len().min(buf.len())..]
                    }
                    _ => return,
                }
            }
            Err(_) => return,
        }
    }
});
