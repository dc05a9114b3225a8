//! Transmission parameters and derived time values (RFC 7252 §4.8, §4.8.2).

use std::time::Duration;

/// Initial retransmission timeout base (RFC 7252 §4.8).
pub const ACK_TIMEOUT: Duration = Duration::from_secs(2);
/// The first timeout is random in [ACK_TIMEOUT, ACK_TIMEOUT * 1.5] (RFC 7252 §4.8).
pub const ACK_RANDOM_FACTOR: f64 = 1.5;
/// Retransmissions of a CON before giving up (RFC 7252 §4.8).
pub const MAX_RETRANSMIT: u32 = 4;
/// Outstanding interactions per peer (RFC 7252 §4.8).
pub const NSTART: u32 = 1;
/// Spread for responding to multicast requests (RFC 7252 §4.8).
pub const DEFAULT_LEISURE: Duration = Duration::from_secs(5);
/// Average bytes per second sent to a peer that does not respond (RFC 7252 §4.8).
pub const PROBING_RATE: u32 = 1;

/// ACK_TIMEOUT * n * ACK_RANDOM_FACTOR, the factor as the exact ratio 3/2 to stay const.
const fn randomized(n: u64) -> Duration {
    Duration::from_millis(ACK_TIMEOUT.as_secs() * 1000 * n * 3 / 2)
}

/// First to last CON send: ACK_TIMEOUT * (2^MAX_RETRANSMIT - 1) * ACK_RANDOM_FACTOR (§4.8.2).
pub const MAX_TRANSMIT_SPAN: Duration = randomized((1 << MAX_RETRANSMIT) - 1);
/// First send to giving up: ACK_TIMEOUT * (2^(MAX_RETRANSMIT+1) - 1) * ACK_RANDOM_FACTOR (§4.8.2).
pub const MAX_TRANSMIT_WAIT: Duration = randomized((1 << (MAX_RETRANSMIT + 1)) - 1);
/// Assumed maximum one-way network latency (RFC 7252 §4.8.2).
pub const MAX_LATENCY: Duration = Duration::from_secs(100);
/// Time to turn a CON into an ACK; = ACK_TIMEOUT (RFC 7252 §4.8.2).
pub const PROCESSING_DELAY: Duration = ACK_TIMEOUT;
/// 2 * MAX_LATENCY + PROCESSING_DELAY (RFC 7252 §4.8.2).
pub const MAX_RTT: Duration = MAX_LATENCY
    .saturating_add(MAX_LATENCY)
    .saturating_add(ACK_TIMEOUT);
/// How long a CON's MID stays in use: MAX_TRANSMIT_SPAN + MAX_RTT (RFC 7252 §4.8.2).
pub const EXCHANGE_LIFETIME: Duration = MAX_TRANSMIT_SPAN.saturating_add(MAX_RTT);
/// How long a NON's MID stays in use: MAX_TRANSMIT_SPAN + MAX_LATENCY (RFC 7252 §4.8.2).
pub const NON_LIFETIME: Duration = MAX_TRANSMIT_SPAN.saturating_add(MAX_LATENCY);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_values_match_rfc_7252_defaults() {
        let spans = [MAX_TRANSMIT_SPAN, MAX_TRANSMIT_WAIT, MAX_RTT];
        assert_eq!(spans.map(|d| d.as_secs()), [45, 93, 202]);
        let lifetimes = [EXCHANGE_LIFETIME, NON_LIFETIME].map(|d| d.as_secs());
        assert_eq!(lifetimes, [247, 145]);
        assert_eq!(randomized(2), ACK_TIMEOUT.mul_f64(2.0 * ACK_RANDOM_FACTOR));
    }
}
