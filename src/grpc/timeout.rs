//! The `grpc-timeout` header (doc/PROTOCOL-HTTP2.md): `TimeoutValue TimeoutUnit`, where the value
//! is 1 to 8 ASCII digits and the unit one of `H M S m u n`.

use std::time::Duration;

use crate::time::Timestamp;

/// The longest value the header can carry.
const MAX_DIGITS: usize = 8;
const MAX_VALUE: u64 = 99_999_999;

/// Units from finest to coarsest, with their length in nanoseconds.
const UNITS: [(u8, u64); 6] = [
    (b'n', 1),
    (b'u', 1_000),
    (b'm', 1_000_000),
    (b'S', 1_000_000_000),
    (b'M', 60_000_000_000),
    (b'H', 3_600_000_000_000),
];

/// Why a `grpc-timeout` value was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutError {
    /// No digits before the unit, or a non-digit among them.
    BadValue,
    /// More than 8 digits.
    TooLong,
    /// The last byte is not one of `H M S m u n`, or the value is empty.
    BadUnit,
}

/// Parses a `grpc-timeout` value, e.g. `100m` or `20S`. Leading zeros are digits like any other.
pub fn parse_timeout(value: &[u8]) -> Result<Duration, TimeoutError> {
    let (&unit, digits) = value.split_last().ok_or(TimeoutError::BadUnit)?;
    let nanos_per_unit = UNITS
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|(_, nanos)| *nanos)
        .ok_or(TimeoutError::BadUnit)?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(TimeoutError::BadValue);
    }
    if digits.len() > MAX_DIGITS {
        return Err(TimeoutError::TooLong);
    }
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    // At most 99_999_999 hours, which is about 3.6e20 ns: beyond u64, so go through u128.
    let nanos = u128::from(n) * u128::from(nanos_per_unit);
    Ok(Duration::new(
        (nanos / 1_000_000_000) as u64,
        (nanos % 1_000_000_000) as u32,
    ))
}

/// Formats `timeout` for a request, in the finest unit whose value fits in 8 digits. The value
/// is rounded up so the server never sees a shorter deadline than the client's; durations
/// beyond the header's range become its maximum, `99999999H`.
pub fn format_timeout(timeout: Duration) -> String {
    let nanos = timeout.as_nanos();
    for (unit, per_unit) in UNITS {
        let n = nanos.div_ceil(u128::from(per_unit));
        if n <= u128::from(MAX_VALUE) {
            return format!("{n}{}", char::from(unit));
        }
    }
    format!("{MAX_VALUE}H")
}

/// The earliest of the calls' deadlines and the connection's own timer: when a gRPC
/// connection (client or server side) next needs waking.
pub(crate) fn next_wake(
    deadlines: impl Iterator<Item = Option<Timestamp>>,
    connection: Option<Timestamp>,
) -> Option<Timestamp> {
    deadlines.flatten().chain(connection).min()
}

/// The streams whose call deadline has passed at `now`.
pub(crate) fn expired<'a>(
    deadlines: impl Iterator<Item = (&'a u32, Option<Timestamp>)>,
    now: Timestamp,
) -> Vec<u32> {
    deadlines
        .filter(|(_, d)| d.is_some_and(|d| d <= now))
        .map(|(&s, _)| s)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_parses() {
        assert_eq!(parse_timeout(b"2H"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_timeout(b"3M"), Ok(Duration::from_secs(180)));
        assert_eq!(parse_timeout(b"20S"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_timeout(b"100m"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_timeout(b"250u"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_timeout(b"7n"), Ok(Duration::from_nanos(7)));
    }

    #[test]
    fn eight_digits_and_leading_zeros_are_fine() {
        assert_eq!(
            parse_timeout(b"99999999H"),
            Ok(Duration::from_secs(99_999_999 * 3600))
        );
        assert_eq!(parse_timeout(b"00000001S"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_timeout(b"0m"), Ok(Duration::ZERO));
    }

    #[test]
    fn more_than_eight_digits_is_rejected() {
        assert_eq!(parse_timeout(b"123456789S"), Err(TimeoutError::TooLong));
        assert_eq!(parse_timeout(b"000000001S"), Err(TimeoutError::TooLong));
    }

    #[test]
    fn missing_or_unknown_unit_is_rejected() {
        assert_eq!(parse_timeout(b""), Err(TimeoutError::BadUnit));
        assert_eq!(parse_timeout(b"100"), Err(TimeoutError::BadUnit));
        assert_eq!(parse_timeout(b"1s"), Err(TimeoutError::BadUnit));
        assert_eq!(parse_timeout(b"1h"), Err(TimeoutError::BadUnit));
        assert_eq!(parse_timeout(b"1\xff"), Err(TimeoutError::BadUnit));
    }

    #[test]
    fn missing_or_non_digit_value_is_rejected() {
        assert_eq!(parse_timeout(b"S"), Err(TimeoutError::BadValue));
        assert_eq!(parse_timeout(b"-1S"), Err(TimeoutError::BadValue));
        assert_eq!(parse_timeout(b" 1S"), Err(TimeoutError::BadValue));
        assert_eq!(parse_timeout(b"1.5S"), Err(TimeoutError::BadValue));
        assert_eq!(parse_timeout(b"1mS"), Err(TimeoutError::BadValue));
    }

    #[test]
    fn formatting_picks_the_finest_unit_that_fits() {
        assert_eq!(format_timeout(Duration::from_nanos(5)), "5n");
        assert_eq!(format_timeout(Duration::from_millis(99)), "99000000n");
        assert_eq!(format_timeout(Duration::from_millis(100)), "100000u");
        assert_eq!(format_timeout(Duration::from_secs(20)), "20000000u");
        assert_eq!(format_timeout(Duration::from_secs(200)), "200000m");
        assert_eq!(format_timeout(Duration::from_secs(100_000)), "100000S");
        assert_eq!(format_timeout(Duration::ZERO), "0n");
    }

    #[test]
    fn formatting_rounds_up_and_saturates() {
        // 100 s + 1 ns needs more than 8 digits of n, u and m: rounds up to whole seconds.
        assert_eq!(format_timeout(Duration::new(100_000, 1)), "100001S");
        assert_eq!(format_timeout(Duration::MAX), "99999999H");
    }

    #[test]
    fn formatted_values_parse_back_to_at_least_the_input() {
        for d in [
            Duration::from_nanos(1),
            Duration::from_millis(1500),
            Duration::new(123_456, 789),
            Duration::from_secs(540),
        ] {
            let parsed = parse_timeout(format_timeout(d).as_bytes()).unwrap();
            assert!(parsed >= d, "{d:?} -> {parsed:?}");
        }
    }
}
