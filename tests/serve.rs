//! `backoffd serve`: every component in one process and one loop, from flags and from a file.

mod common;

use std::net::{TcpListener, UdpSocket};
use std::process::Command;
use std::time::Duration;

use backoffd::coap::{Code, Message, MessageBuilder, MessageType};
use common::exposition::Exposition;
use common::upstream::{Script, Upstream};
use common::{daemon, free_port, http};

/// A CoAP upstream that answers every request piggybacked with 2.05 "late" after `delay`.
fn late_upstream(delay: Duration) -> Upstream {
    Script::new().payload(b"late").delay(delay).start()
}

#[test]
fn serves_proxy_reconnect_server_and_metrics_in_one_process() {
    let upstream = late_upstream(Duration::ZERO);
    let up = upstream.addr.to_string();
    let (control, retry) = (free_port().to_string(), free_port().to_string());
    let (mut daemon, proxy) = daemon::start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &up,
            "--control_port",
            &control,
            "--retry_port",
            &retry,
            "--metrics",
            "127.0.0.1:0",
        ],
        "CoAP proxy listening on ",
    );
    daemon.wait_log(
        &format!("Server listening on 0.0.0.0:{control}"),
        Duration::from_secs(10),
    );
    let metrics = daemon.wait_addr("metrics listening on ");
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    for mid in 0..3u16 {
        let mut req = Vec::new();
        MessageBuilder::new(&mut req, MessageType::Con, Code::GET, mid, b"t")
            .finish()
            .unwrap();
        client.send_to(&req, proxy).unwrap();
        let mut buf = [0u8; 1500];
        let n = client.recv(&mut buf).unwrap();
        assert_eq!(Message::parse(&buf[..n]).unwrap().payload(), b"late");
    }
    let answer = http::get(metrics, "/metrics");
    assert_eq!(answer.status, 200);
    let doc = Exposition::parse(&answer.body);
    assert_eq!(doc.get("backoffd_coap_requests_total"), 3.0);
    assert_eq!(doc.get("backoffd_reconnect_starts_total"), 0.0);
    assert!(doc.has_family_prefix("backoffd_timer_wheel_timers"));
    assert_eq!(http::get(metrics, "/healthz").status, 200);
    assert_eq!(daemon.terminate_code(), Some(0));
}

#[test]
fn the_example_config_file_is_valid() {
    let out = Command::new(env!("CARGO_BIN_EXE_backoffd"))
        .args([
            "serve",
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/examples/backoffd.conf"),
            "--check-config",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("proxy on").count(), 2, "{stdout}");
    assert!(stdout.contains("configuration OK"));
}

#[test]
fn config_errors_name_file_line_and_key() {
    let dir = std::env::temp_dir().join(format!("backoffd-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (text, line, key) in [
        (
            "[proxy]\nupstream = 127.0.0.1:5684\n\njitter = 3\n",
            4,
            "jitter",
        ),
        (
            "[proxy]\nupstream = 127.0.0.1:5684\nfrobnicate = 1\n",
            3,
            "frobnicate",
        ),
        ("[reconnect]\ncontrol_port = 8080\n", 1, "retry_port"),
        ("[metrics]\nlisten = nowhere\n", 2, "listen"),
        ("[nonsense]\n", 1, "nonsense"),
    ] {
        let path = dir.join("bad.conf");
        std::fs::write(&path, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_backoffd"))
            .args([
                "serve",
                "--config",
                path.to_str().unwrap(),
                "--check-config",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {err}");
        assert!(
            err.contains(&format!("bad.conf:{line}:")) && err.contains(key),
            "{text}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn nothing_to_serve_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_backoffd"))
        .arg("serve")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_port_in_use_fails_start_up_with_one_line() {
    let taken = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_backoffd"))
        .args(["serve", "--control_port", &port, "--retry_port", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&port) && err.trim().lines().count() == 1,
        "{err}"
    );
}

#[test]
fn sigterm_under_load_answers_everything_in_flight_then_exits_0() {
    let upstream = late_upstream(Duration::from_millis(400));
    let up = upstream.addr.to_string();
    let (mut daemon, proxy) = daemon::start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &up,
            "--ack-delay",
            "5s",
            "--drain",
            "5s",
        ],
        "CoAP proxy listening on ",
    );
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = |mid: u16| {
        let mut req = Vec::new();
        MessageBuilder::new(
            &mut req,
            MessageType::Con,
            Code::GET,
            mid,
            &mid.to_be_bytes(),
        )
        .finish()
        .unwrap();
        req
    };
    const IN_FLIGHT: u16 = 100;
    for mid in 0..IN_FLIGHT {
        client.send_to(&request(mid), proxy).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    daemon.sigterm();
    daemon.wait_log("shutting down", Duration::from_secs(5));
    client.send_to(&request(IN_FLIGHT), proxy).unwrap();
    let mut answers = std::collections::HashMap::new();
    let mut buf = [0u8; 1500];
    while answers.len() < usize::from(IN_FLIGHT) + 1 {
        let n = client.recv(&mut buf).expect("every request is answered");
        let m = Message::parse(&buf[..n]).unwrap();
        answers.insert(m.message_id(), m.code());
    }
    for mid in 0..IN_FLIGHT {
        assert_eq!(
            answers[&mid],
            Code::CONTENT,
            "in-flight request {mid} finished during the drain"
        );
    }
    assert_eq!(
        answers[&IN_FLIGHT],
        Code::SERVICE_UNAVAILABLE,
        "new work is refused while draining"
    );
    let status = daemon.expect_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0));
}

/// A `[proxy]` section takes the CoAP-over-TCP flags, and `--check-config` shows them.
#[test]
#[cfg(feature = "tcp")]
fn a_proxy_section_takes_the_tcp_listener() {
    let dir = std::env::temp_dir().join(format!("backoffd-serve-tcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tcp.conf");
    let text = "[proxy]\nlisten-tcp = 127.0.0.1:5683\ntcp-csm-timeout = 5s\n\
                tcp-max-connections-per-source = 8\nupstream = 127.0.0.1:5684\n";
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_backoffd"))
        .args([
            "serve",
            "--config",
            file.to_str().unwrap(),
            "--check-config",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(
            "coap+tcp on 127.0.0.1:5683: up to 512 connections, 8 per source; CSM within 5s"
        ),
        "{stdout}"
    );
}
