//! SETTINGS both ways (RFC 9113 §6.5): what we advertise, what the peer's values change, and
//! the handshake they complete (§3.4).

use crate::http2::error::H2Error;
use crate::http2::frame::{self, SettingsIter};

use super::{
    flow_error, proto, Connection, Event, ReadState, Role, DEFAULT_WINDOW, MAX_ENCODER_TABLE,
};

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
    fn new(conn: &Connection) -> Self {
        let before = conn.peer.initial_window_size;
        WindowChange {
            before,
            largest: None,
            last: before,
        }
    }

    fn check(&mut self, conn: &Connection, value: u32) -> Result<(), H2Error> {
        let delta = i64::from(value) - i64::from(self.before);
        let largest = *self.largest.get_or_insert_with(|| {
            let windows = conn.streams.values().map(|s| s.send_window.get());
            windows.max().unwrap_or(i64::MIN)
        });
        if largest.saturating_add(delta) > i64::from(frame::MAX_WINDOW_SIZE) {
            return Err(flow_error("INITIAL_WINDOW_SIZE overflows a stream window"));
        }
        self.last = value;
        Ok(())
    }
}

/// The peer's SETTINGS (§6.5.2) that shape what we send.
pub(super) struct PeerSettings {
    pub(super) max_concurrent_streams: u32,
    pub(super) initial_window_size: u32,
    pub(super) max_frame_size: u32,
}

impl Connection {
    /// The SETTINGS we advertise (§6.5.2): standard ids only, never gRPC's
    /// private 0xFE03. A client disables push (§8.4).
    pub(super) fn local_settings(&self) -> Vec<(u16, u32)> {
        let c = &self.config;
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
        if self.role == Role::Client {
            settings.push((frame::SETTINGS_ENABLE_PUSH, 0));
        }
        settings
    }

    /// SETTINGS (§6.5): applied in order, then acknowledged (§6.5.3). Of
    /// its INITIAL_WINDOW_SIZE values only the last moves the windows, once
    /// per frame; each is still checked for overflow in turn (§6.9.2).
    pub(super) fn on_settings(&mut self, params: SettingsIter<'_>) -> Result<(), H2Error> {
        let mut window = WindowChange::new(self);
        for (id, value) in params {
            match id {
                frame::SETTINGS_INITIAL_WINDOW_SIZE => window.check(self, value)?,
                _ => self.apply_setting(id, value)?,
            }
        }
        self.set_peer_initial_window(window.last);
        frame::encode_settings_ack(&mut self.output);
        if self.read_state == ReadState::FirstSettings {
            self.read_state = ReadState::Frames;
            self.check_handshake();
        }
        self.emit(Event::SettingsReceived);
        self.flush_streams();
        Ok(())
    }

    /// One setting (§6.5.2) other than INITIAL_WINDOW_SIZE; values were
    /// range-checked by the codec, and unknown ids and the advisory
    /// MAX_HEADER_LIST_SIZE are ignored.
    fn apply_setting(&mut self, id: u16, value: u32) -> Result<(), H2Error> {
        match id {
            frame::SETTINGS_HEADER_TABLE_SIZE => {
                // We use at most 4096 octets of what the peer offers.
                let size = value.min(MAX_ENCODER_TABLE);
                if size != self.encoder_table_size {
                    self.encoder_table_size = size;
                    self.encoder.set_max_table_size(size as usize);
                }
            }
            frame::SETTINGS_ENABLE_PUSH if value == 1 && self.role == Role::Client => {
                return Err(proto("server sent ENABLE_PUSH=1"));
            }
            frame::SETTINGS_MAX_CONCURRENT_STREAMS => self.peer.max_concurrent_streams = value,
            frame::SETTINGS_MAX_FRAME_SIZE => self.peer.max_frame_size = value,
            _ => {}
        }
        Ok(())
    }

    /// §6.9.2: a new INITIAL_WINDOW_SIZE shifts every stream's send window by
    /// the difference (checked by [`WindowChange`]), once for the whole frame.
    fn set_peer_initial_window(&mut self, value: u32) {
        let delta = i64::from(value) - i64::from(self.peer.initial_window_size);
        if delta == 0 {
            return;
        }
        self.peer.initial_window_size = value;
        for (&id, s) in self.streams.iter_mut() {
            // Cannot fail: the largest window plus the largest delta was checked.
            let _ = s.send_window.adjust(delta);
            if !s.scheduled && s.has_pending() {
                s.scheduled = true;
                self.send_queue.push_back(id);
            }
        }
    }

    /// Our SETTINGS took effect (§6.5.3): the peer may use our HPACK table size
    /// and has shifted its view of every stream window (§6.9.2), so we do too.
    pub(super) fn on_settings_ack(&mut self) {
        if self.settings_acked {
            return; // we send one SETTINGS; extra ACKs mean nothing
        }
        self.settings_acked = true;
        self.decoder
            .set_max_allowed_table_size(self.config.header_table_size as usize);
        for s in self.streams.values_mut() {
            s.recv_window.resize(self.config.initial_window_size);
        }
        self.check_handshake();
    }

    fn check_handshake(&mut self) {
        if self.read_state == ReadState::Frames && self.settings_acked {
            self.handshake_deadline = None;
        }
    }

    /// Our stream receive window: 65535 until the peer acknowledges our
    /// INITIAL_WINDOW_SIZE (§6.9.2).
    pub(super) fn local_initial_window(&self) -> u32 {
        match self.settings_acked {
            true => self.config.initial_window_size,
            false => DEFAULT_WINDOW,
        }
    }
}
