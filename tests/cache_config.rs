//! The response cache's operator side through the real binary: `--cache-size` on `proxy`,
//! `cache-size` in a `serve --config` file, and what `--check-config` says about it.

#![cfg(feature = "cache")]

mod common;

use std::net::UdpSocket;
use std::process::{Command, Output};

use common::daemon::{self, proxy_with_metrics};
use common::exposition::scrape;

fn backoffd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_backoffd"))
        .args(args)
        .output()
        .expect("run backoffd")
}

/// `serve --config FILE --check-config` on a file holding `text`.
fn check_config(name: &str, text: &str) -> Output {
    let dir = std::env::temp_dir().join(format!("backoffd-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the config file");
    let path = path.to_str().expect("a UTF-8 path");
    backoffd(&["serve", "--config", path, "--check-config"])
}

/// Exit code 2 and one line on stderr containing every one of `needles`.
fn assert_usage_error(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    for needle in needles {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
}

#[test]
fn a_proxy_with_a_cache_size_in_mib_starts_and_stops() {
    let upstream = UdpSocket::bind("127.0.0.1:0").expect("an upstream port");
    let up = upstream.local_addr().expect("its address").to_string();
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--cache-size",
        "1MiB",
    ];
    let mut daemon = daemon::proxy("debug", &args);
    assert_eq!(daemon.proc.terminate_code(), Some(0));
}

#[test]
fn a_cache_size_in_another_unit_exits_2_with_one_line_naming_the_accepted_forms() {
    for bad in ["64kB", "64K", "4MB", "4mib", "1GiB", "1.5MiB", "lots"] {
        let out = backoffd(&["proxy", "--upstream", "127.0.0.1:5684", "--cache-size", bad]);
        assert_usage_error(&out, &["--cache-size", bad, "65536, 64KiB, 4MiB"]);
    }
}

#[test]
fn a_cache_size_over_1024mib_exits_2_with_one_line() {
    let out = backoffd(&[
        "proxy",
        "--upstream",
        "127.0.0.1:5684",
        "--cache-size=1025MiB",
    ]);
    assert_usage_error(&out, &["--cache-size: must be at most 1024MiB"]);
}

#[test]
fn proxy_help_documents_cache_size_and_the_size_forms() {
    let out = backoffd(&["proxy", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--cache-size BYTES"), "{help}");
    assert!(help.contains("(default 0: off; at most 1024MiB)"), "{help}");
    assert!(help.contains("Sizes: 65536, 64KiB, 4MiB"), "{help}");
}

#[test]
fn check_config_reports_each_proxys_cache() {
    let text = "[proxy]\nlisten = 127.0.0.1:5683\nupstream = 127.0.0.1:5684\ncache-size = 64KiB\n\
                [proxy]\nlisten = 127.0.0.1:5685\nupstream = 127.0.0.1:5686\n";
    let out = check_config("cache.conf", text);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let proxies: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("proxy on"))
        .collect();
    assert_eq!(proxies.len(), 2, "{stdout}");
    assert!(
        proxies[0].ends_with("; response cache on, 65536 bytes (64KiB)"),
        "{stdout}"
    );
    assert!(proxies[1].ends_with("; response cache off"), "{stdout}");
}

#[test]
fn a_bad_cache_size_in_a_config_file_names_file_line_and_key() {
    for (value, says) in [
        ("64kB", "invalid value"),
        ("2048MiB", "must be at most 1024MiB"),
    ] {
        let text = format!("[proxy]\nupstream = 127.0.0.1:5684\ncache-size = {value}\n");
        let out = check_config("bad-cache.conf", &text);
        assert_usage_error(&out, &["bad-cache.conf:3: cache-size: ", says]);
    }
}

#[test]
fn the_response_cache_families_are_in_a_scrape_with_the_budget() {
    let upstream = UdpSocket::bind("127.0.0.1:0").expect("an upstream port");
    let up = upstream.local_addr().expect("its address");
    let (mut daemon, _, metrics) = proxy_with_metrics(up, &["--cache-size", "64KiB"]);
    let m = scrape(metrics);
    for (name, kind) in [
        ("hits_total", "counter"),
        ("misses_total", "counter"),
        ("revalidations_total", "counter"),
        ("revalidated_total", "counter"),
        ("invalidations_total", "counter"),
        ("evictions_total", "counter"),
        ("expired_total", "counter"),
        ("stored_total", "counter"),
        ("entries", "gauge"),
        ("bytes", "gauge"),
        ("budget_bytes", "gauge"),
    ] {
        let family = format!("backoffd_coap_response_cache_{name}");
        assert_eq!(
            m.types.get(&family).map(String::as_str),
            Some(kind),
            "{family}"
        );
    }
    assert_eq!(m.get("backoffd_coap_response_cache_budget_bytes"), 65536.0);
    assert_eq!(m.get("backoffd_coap_response_cache_entries"), 0.0);
    assert_eq!(daemon.terminate_code(), Some(0));
}
