//! Each source's share of the observations (issue 40, row 5), against the real binary at its
//! default flags: 4 coap+tcp connections from one address (127.0.0.2) register 256
//! observations each; then a client from another address (127.0.0.3) registers and is
//! notified. Before the share, the first address took all 1,000 observations
//! (`--max-observations`) and the second client's registration was answered without
//! Observe. The attack benchmark's `observe_share` probe runs the same scenario
//! (`observe_share/scenario.rs`) and prints its figures.

#![cfg(feature = "tcp")]

mod common;
#[path = "observe_share/scenario.rs"]
mod scenario;

#[test]
fn one_address_with_four_connections_gets_its_share_and_another_client_is_notified() {
    let seen = scenario::run(&[]);
    assert_eq!(seen.first_address_registered, 125, "{seen:?}");
    assert!(seen.second_registered, "{seen:?}");
    assert!(seen.second_notified, "{seen:?}");
}
