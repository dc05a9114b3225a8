//! Case 9 of tests/reconnect_grpcio.rs: the server's flags.

use std::process::Command;
use std::time::Duration;

use super::common::{free_wildcard_ports, Proc};
use super::harness::{grpcio, Server};
use super::{shared, BACKOFFD, SERVER};

/// Runs the server with `args`, expecting a usage error: non-zero exit and one stderr line
/// naming `flag`.
fn expect_usage_error(args: &[&str], flag: &str) {
    let mut cmd = Command::new(SERVER);
    cmd.args(args);
    let mut p = Proc::spawn("reconnect_interop_server", &mut cmd);
    let status = p.expect_exit(Duration::from_secs(5));
    assert!(!status.success(), "{args:?} was accepted");
    let err = p.stderr();
    assert_eq!(err.len(), 1, "{args:?}: {err:?}");
    assert!(err[0].contains(flag), "{args:?}: {err:?}");
}

/// 9. Missing or zero ports are usage errors naming the flag; all four flag spellings work
///    (checked end to end: the retry port given is the one bound at Start).
#[test]
fn flags_missing_zero_and_four_spellings() {
    let _shared = shared();
    expect_usage_error(&[], "--control_port");
    expect_usage_error(&["--retry_port=5001"], "--control_port");
    expect_usage_error(&["--control_port=5000"], "--retry_port");
    expect_usage_error(&["--control_port=0", "--retry_port=5001"], "--control_port");
    expect_usage_error(&["--control_port=5000", "--retry_port=0"], "--retry_port");
    expect_usage_error(&["-control_port", "5000", "-retry_port"], "--retry_port");

    type Spell = fn(&str, u16) -> Vec<String>;
    let spellings: [(&str, Spell); 4] = [
        ("--x=V", |n, p| vec![format!("--{n}={p}")]),
        ("--x V", |n, p| vec![format!("--{n}"), p.to_string()]),
        ("-x=V", |n, p| vec![format!("-{n}={p}")]),
        ("-x V", |n, p| vec![format!("-{n}"), p.to_string()]),
    ];
    for (i, (name, spell)) in spellings.iter().enumerate() {
        let [control, retry] = free_wildcard_ports();
        let mut args = spell("control_port", control);
        args.extend(spell("retry_port", retry));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // The last spelling also goes through `backoffd reconnect-server`.
        let mut server = if i == 3 {
            let mut all = vec!["reconnect-server"];
            all.extend(&args);
            Server::start_with(BACKOFFD, &all, control, retry)
        } else {
            Server::start_with(SERVER, &args, control, retry)
        };
        let (c, q) = server.ports();
        let r = grpcio(&[
            "start-stop",
            "--control",
            &c,
            "--retry",
            &q,
            "--probes",
            "0",
        ])
        .results(Duration::from_secs(20));
        r.expect("passed", "true");
        server.proc.wait_line(
            &format!("test tcp server listening on 0.0.0.0:{retry}"),
            Duration::from_secs(5),
        );
        let (status, _) = server.terminate(Duration::from_secs(10));
        assert_eq!(status.code(), Some(0), "{name}: {}", server.proc.dump());
    }
}
