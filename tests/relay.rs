//! `backoffd relay`, the proxy benchmark's baseline, over loopback: it carries CoAP both ways
//! for one client, rejects bad flags, and stops on SIGTERM.

mod common;

// The load generator is benchmark support, shared with tests, not library API; each user
// takes part of it.
#[allow(dead_code, unused_imports)]
#[path = "../benches/loadgen/mod.rs"]
mod loadgen;

use std::process::Command;
use std::time::Duration;

use backoffd::coap::option::URI_PATH;
use common::daemon;
use loadgen::{FastUpstream, LoadSpec, Offered};

#[test]
fn the_relay_carries_every_request_and_answer() {
    let mut upstream = FastUpstream::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let up = upstream.local_addr().unwrap().to_string();
    let (mut daemon, relay) = daemon::start(
        &["relay", "--listen", "127.0.0.1:0", "--upstream", &up],
        "relay listening on ",
    );
    for confirmable in [true, false] {
        let spec = LoadSpec {
            target: relay,
            confirmable,
            options: vec![(URI_PATH, b"x".to_vec())],
            offered: Offered::Window(32),
            warmup: Duration::from_millis(50),
            duration: Duration::from_millis(300),
            timeout: Duration::from_secs(1),
            burst: 64,
        };
        let report = loadgen::run(&spec, Some(&mut upstream)).unwrap();
        assert!(report.answered > 0, "{report:?}");
        assert_eq!(report.errors + report.lost, 0, "{report:?}");
    }
    assert_eq!(daemon.terminate_code(), Some(0));
}

#[test]
fn missing_or_bad_flags_exit_2_with_one_line() {
    for args in [
        &["relay", "--listen", "127.0.0.1:0"][..],
        &["relay", "--upstream", "127.0.0.1:9"][..],
        &["relay", "--listen", "nonsense", "--upstream", "127.0.0.1:9"][..],
        &["relay", "--bogus", "1"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_backoffd"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("backoffd relay: "), "{stderr}");
    }
}
