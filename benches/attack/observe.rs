//! Issue 40's Observe probe, row 5 (`observe_share`): 4 coap+tcp connections from one address
//! (127.0.0.2) x 256 registrations, then a client from another address (127.0.0.3). The
//! scenario is the test's (tests/observe_share/scenario.rs), so the figures printed here are
//! the ones it asserts on.

/// The tests' helpers, which the scenario uses as `super::common`.
#[cfg(feature = "tcp")]
use super::reflection::common;

#[cfg(feature = "tcp")]
#[path = "../../tests/observe_share/scenario.rs"]
mod scenario;

/// How many of the first address's registrations were taken, and what the second client got.
#[cfg(feature = "tcp")]
pub fn observe_share() -> Vec<(String, String)> {
    let seen = scenario::run(&[]);
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
    vec![
        (
            format!(
                "observations taken by one address ({} coap+tcp connections x {} registrations)",
                scenario::CONNECTIONS,
                scenario::PER_CONNECTION
            ),
            format!(
                "{} of {}",
                seen.first_address_registered,
                scenario::CONNECTIONS * scenario::PER_CONNECTION
            ),
        ),
        (
            "a second address's registration answered with Observe".into(),
            yes_no(seen.second_registered),
        ),
        (
            "... and notified within 3 s".into(),
            yes_no(seen.second_notified),
        ),
    ]
}

/// Without the `tcp` feature there is no coap+tcp listener to probe.
#[cfg(not(feature = "tcp"))]
pub fn observe_share() -> Vec<(String, String)> {
    vec![("skipped".into(), "built without the `tcp` feature".into())]
}
