//! SETTINGS both ways (RFC 9113 §6.5): what we advertise, and what the peer's values change in
//! what we send.

use crate::http2::error::H2Error;
use crate::http2::frame::{self, SettingsIter};
use crate::http2::hpack::Encoder;

use super::streams::StreamTable;
use super::{flow_error, proto, Config, Role, DEFAULT_TABLE_SIZE, DEFAULT_WINDOW};

/// Most HPACK table we keep for encoding, however much the peer offers.
const MAX_ENCODER_TABLE: u32 = 4096;

/// The SETTINGS we advertise (§6.5.2): standard ids only, never gRPC's private 0xFE03. A
/// client disables push (§8.4).
pub(super) fn local_settings(c: &Config, role: Role) -> Vec<(u16, u32)> {
    let mut settings = vec![
        (
            frame::SETTINGS_MAX_CONCURRENT_STREAMS,
            c.max_concurrent_streams,
        ),
        (frame::SETTINGS_INITIAL_WINDOW_SIZE, c.initial_window_size),
        (frame::SETTINGS_MAX_FRAME_SIZE, c.max_frame_size),
        (frame::SETTINGS_MAX_HEADER_LIST_SIZE, c.max_header_list_size),
        (frame::SETTINGS_HEADER_TABLE_SIZE, c.header_table_size),
    ];
    if role == Role::Client {
        settings.push((frame::SETTINGS_ENABLE_PUSH, 0));
    }
    settings
}

/// The INITIAL_WINDOW_SIZE values of one SETTINGS frame (§6.5.3: in order).
/// Each shifts every stream window by its difference from the value before
/// the frame; a window past 2^31-1 at any step is a FLOW_CONTROL_ERROR
/// (§6.9.2), which happens iff the largest window plus that difference
/// overflows. So one pass finds the largest window, each value is an O(1)
/// check, and only the last value is applied: O(streams + entries), not
/// O(streams x entries).
struct WindowChange {
    before: u32,
    largest: Option<i64>,
    last: u32,
}

impl WindowChange {
    fn new(before: u32) -> Self {
        WindowChange {
            before,
            largest: None,
            last: before,
        }
    }

    fn check(&mut self, streams: &StreamTable, value: u32) -> Result<(), H2Error> {
        let delta = i64::from(value) - i64::from(self.before);
        let largest = *self
            .largest
            .get_or_insert_with(|| streams.largest_send_window());
        if largest.saturating_add(delta) > i64::from(frame::MAX_WINDOW_SIZE) {
            return Err(flow_error("INITIAL_WINDOW_SIZE overflows a stream window"));
        }
        self.last = value;
        Ok(())
    }
}

/// The peer's SETTINGS (§6.5.2) that shape what we send.
#[derive(Debug)]
pub(super) struct PeerSettings {
    pub(super) max_concurrent_streams: u32,
    pub(super) initial_window_size: u32,
    pub(super) max_frame_size: u32,
    /// The HPACK table size our encoder uses: the peer's HEADER_TABLE_SIZE, at most
    /// [`MAX_ENCODER_TABLE`].
    header_table_size: u32,
}

impl Default for PeerSettings {
    /// The initial values, before the peer's SETTINGS (§6.5.2).
    fn default() -> Self {
        PeerSettings {
            max_concurrent_streams: u32::MAX,
            initial_window_size: DEFAULT_WINDOW,
            max_frame_size: frame::DEFAULT_MAX_FRAME_SIZE,
            header_table_size: DEFAULT_TABLE_SIZE,
        }
    }
}

impl PeerSettings {
    /// One SETTINGS frame (§6.5), applied in order. Of its INITIAL_WINDOW_SIZE values only
    /// the last moves the stream windows, once per frame; each is still checked for overflow
    /// in turn (§6.9.2).
    pub(super) fn apply(
        &mut self,
        params: SettingsIter<'_>,
        streams: &mut StreamTable,
        encoder: &mut Encoder,
    ) -> Result<(), H2Error> {
        let mut window = WindowChange::new(self.initial_window_size);
        for (id, value) in params {
            match id {
                frame::SETTINGS_INITIAL_WINDOW_SIZE => window.check(streams, value)?,
                _ => self.apply_setting(id, value, streams.role(), encoder)?,
            }
        }
        self.set_initial_window(window.last, streams);
        Ok(())
    }

    /// One setting (§6.5.2) other than INITIAL_WINDOW_SIZE; values were range-checked by the
    /// codec, and unknown ids and the advisory MAX_HEADER_LIST_SIZE are ignored.
    fn apply_setting(
        &mut self,
        id: u16,
        value: u32,
        role: Role,
        encoder: &mut Encoder,
    ) -> Result<(), H2Error> {
        match id {
            frame::SETTINGS_HEADER_TABLE_SIZE => {
                // We use at most 4096 octets of what the peer offers.
                let size = value.min(MAX_ENCODER_TABLE);
                if size != self.header_table_size {
                    self.header_table_size = size;
                    encoder.set_max_table_size(size as usize);
                }
            }
            frame::SETTINGS_ENABLE_PUSH if value == 1 && role == Role::Client => {
                return Err(proto("server sent ENABLE_PUSH=1"));
            }
            frame::SETTINGS_MAX_CONCURRENT_STREAMS => self.max_concurrent_streams = value,
            frame::SETTINGS_MAX_FRAME_SIZE => self.max_frame_size = value,
            _ => {}
        }
        Ok(())
    }

    /// §6.9.2: a new INITIAL_WINDOW_SIZE shifts every stream's send window by
    /// the difference (checked by [`WindowChange`]), once for the whole frame.
    fn set_initial_window(&mut self, value: u32, streams: &mut StreamTable) {
        let delta = i64::from(value) - i64::from(self.initial_window_size);
        if delta == 0 {
            return;
        }
        self.initial_window_size = value;
        streams.shift_send_windows(delta);
    }
}
