//! Flow-control windows (RFC 9113 §5.2, §6.9): how much we may send, and how
//! much the peer may send us before we hand credit back.

use super::frame::MAX_WINDOW_SIZE;

/// A window went past 2^31-1, or the peer sent more than it was allowed (§6.9.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowControlError;

/// What we may still send on a stream or the connection (§6.9.1). Signed,
/// because a smaller SETTINGS_INITIAL_WINDOW_SIZE can make it negative (§6.9.2).
#[derive(Clone, Copy, Debug)]
pub struct SendWindow(i64);

impl SendWindow {
    pub fn new(size: u32) -> Self {
        SendWindow(i64::from(size))
    }

    /// The window itself; negative after a smaller INITIAL_WINDOW_SIZE.
    pub fn get(self) -> i64 {
        self.0
    }

    pub fn available(self) -> usize {
        usize::try_from(self.0).unwrap_or(0)
    }

    pub fn consume(&mut self, n: usize) {
        self.0 -= i64::try_from(n).unwrap_or(i64::MAX);
    }

    /// A WINDOW_UPDATE increment (§6.9.1) or an INITIAL_WINDOW_SIZE change
    /// (§6.9.2); a window above 2^31-1 is a FLOW_CONTROL_ERROR.
    pub fn adjust(&mut self, delta: i64) -> Result<(), FlowControlError> {
        let window = self.0 + delta;
        if window > i64::from(MAX_WINDOW_SIZE) {
            return Err(FlowControlError);
        }
        self.0 = window;
        Ok(())
    }
}

/// What the peer may still send us, plus the credit we owe it back.
///
/// Credit is returned only for octets the application has taken (or that
/// were discarded), so the window also bounds what we buffer for it.
#[derive(Clone, Copy, Debug)]
pub struct RecvWindow {
    window: i64,
    size: u32,
    owed: u32,
}

impl RecvWindow {
    pub fn new(size: u32) -> Self {
        RecvWindow {
            window: i64::from(size),
            size,
            owed: 0,
        }
    }

    /// Counts a DATA payload, padding included; exceeding the window is an
    /// error (§6.9.1).
    pub fn receive(&mut self, n: u32) -> Result<(), FlowControlError> {
        if i64::from(n) > self.window {
            return Err(FlowControlError);
        }
        self.window -= i64::from(n);
        Ok(())
    }

    /// Returns `n` consumed octets. Once half the window is owed, yields the
    /// WINDOW_UPDATE increment, so a sender is refilled long before it stalls.
    pub fn release(&mut self, n: u32) -> Option<u32> {
        self.owed = self.owed.saturating_add(n);
        if self.owed == 0 || self.owed < self.size / 2 {
            return None;
        }
        self.window += i64::from(self.owed);
        Some(std::mem::take(&mut self.owed))
    }

    /// Our SETTINGS_INITIAL_WINDOW_SIZE took effect: the peer shifted its view
    /// of every stream window by the difference when it acknowledged (§6.9.2).
    pub fn resize(&mut self, size: u32) {
        self.window += i64::from(size) - i64::from(self.size);
        self.size = size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_update_past_2_pow_31_minus_1_is_an_error() {
        let mut w = SendWindow::new(MAX_WINDOW_SIZE - 1);
        assert_eq!(w.adjust(1), Ok(()));
        assert_eq!(w.adjust(1), Err(FlowControlError));
        assert_eq!(w.available(), MAX_WINDOW_SIZE as usize);
    }

    #[test]
    fn send_window_may_go_negative_and_then_offers_nothing() {
        let mut w = SendWindow::new(10);
        w.consume(10);
        w.adjust(-5).unwrap();
        assert_eq!(w.available(), 0);
        w.adjust(6).unwrap();
        assert_eq!(w.available(), 1);
    }

    #[test]
    fn receiving_more_than_the_window_is_an_error() {
        let mut w = RecvWindow::new(100);
        assert_eq!(w.receive(60), Ok(()));
        assert_eq!(w.receive(41), Err(FlowControlError));
    }

    #[test]
    fn credit_is_returned_once_half_the_window_is_consumed() {
        let mut w = RecvWindow::new(100);
        w.receive(100).unwrap();
        assert_eq!(w.release(49), None);
        assert_eq!(w.release(1), Some(50));
        assert_eq!(w.receive(50), Ok(()));
        assert_eq!(w.receive(1), Err(FlowControlError));
    }

    #[test]
    fn releasing_nothing_never_yields_a_zero_increment() {
        assert_eq!(RecvWindow::new(0).release(0), None);
    }
}
