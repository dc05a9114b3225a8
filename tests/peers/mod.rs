//! The interop suites' harness on top of tests/common: the independently written peers
//! (aiocoap, libcoap) installed by tests/interop/setup.sh, the real `backoffd proxy`, taps and
//! clients. Used by tests/coap_interop.rs, tests/http_cross_proxy.rs, tests/http_browser.rs and
//! tests/oscore_interop.rs, each of which also declares `mod common`.

#![allow(dead_code)]

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use crate::common::daemon::{self, Proxy};
pub use crate::common::{free_port_on, Proc};

pub const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
/// Size of the block-wise bodies.
pub const BIG: usize = 4096;

// ------------------------------------------------------------------------------------------
// Peers: installed once per test process by tests/interop/setup.sh.
// ------------------------------------------------------------------------------------------

pub struct Peers {
    /// The venv's interpreter, which has aiocoap.
    pub python: PathBuf,
}

/// Runs setup.sh on first use; every test fails with its message if it could not install.
pub fn peers() -> &'static Peers {
    static PEERS: OnceLock<Result<Peers, String>> = OnceLock::new();
    match PEERS.get_or_init(install_peers) {
        Ok(peers) => peers,
        Err(e) => panic!("{e}"),
    }
}

pub fn install_peers() -> Result<Peers, String> {
    let venv = Path::new(MANIFEST_DIR).join("target").join("interop-venv");
    let script = Path::new(MANIFEST_DIR).join("tests/interop/setup.sh");
    let mut setup = Proc::spawn("setup.sh", Command::new("bash").arg(&script).arg(&venv));
    // A first install runs apt-get and pip: allow it minutes; a later one takes ~0.2 s.
    let status = setup.wait_exit(Duration::from_secs(900));
    let log = setup.stderr().join("\n");
    match status {
        Some(s) if s.success() => {
            eprintln!("{}", log.lines().last().unwrap_or_default());
            Ok(Peers {
                python: venv.join("bin").join("python"),
            })
        }
        Some(s) => Err(format!(
            "tests/interop/setup.sh failed ({s}); the interop peers are not installed:\n{log}"
        )),
        None => Err(format!(
            "tests/interop/setup.sh did not finish within 900 s:\n{log}"
        )),
    }
}

pub fn script(name: &str) -> PathBuf {
    Path::new(MANIFEST_DIR).join("tests/interop").join(name)
}

/// A per-test scratch directory under Cargo's target tmpdir.
pub fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("interop")
        .join(format!("{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The body used for every 4 KiB transfer; aiocoap_server.py's `big_body` builds the same.
pub fn big_body() -> Vec<u8> {
    (0..BIG).map(|i| ((i * 31 + i / 256) % 251) as u8).collect()
}

// ------------------------------------------------------------------------------------------
// Starting peers, the proxy and taps.
// ------------------------------------------------------------------------------------------

pub const START: Duration = Duration::from_secs(15);

/// tests/interop/aiocoap_server.py on 127.0.0.1 and a kernel-chosen port.
pub fn aiocoap_server() -> (Proc, u16) {
    aiocoap_server_with(&[])
}

/// [`aiocoap_server`] with extra arguments.
pub fn aiocoap_server_with(args: &[&str]) -> (Proc, u16) {
    let mut p = Proc::spawn(
        "aiocoap server",
        Command::new(&peers().python)
            .arg(script("aiocoap_server.py"))
            .args(args),
    );
    let port = p.wait_stdout("READY ", START).parse().unwrap();
    (p, port)
}

/// An empty CON (CoAP ping) must come back as RST with the same Message ID.
pub fn answers_ping(addr: SocketAddr) -> bool {
    let local = if addr.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    };
    let sock = UdpSocket::bind(local).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let ping = [0x40, 0x00, 0x12, 0x34];
    if sock.send_to(&ping, addr).is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    matches!(sock.recv_from(&mut buf), Ok((4, _)) if buf[0] == 0x70 && buf[2..4] == ping[2..4])
}

/// libcoap's example server on `host` (127.0.0.1 or ::1) and a free port; ready when it
/// answers a CoAP ping. It serves `/` (a text naming libcoap), `/time` (observable) and
/// `/example_data` (GET, and PUT which stores the body; block-wise by libcoap).
pub fn libcoap_server(host: &str) -> (Proc, u16) {
    peers();
    for _ in 0..5 {
        let port = free_port_on(host);
        let mut p = Proc::spawn(
            "coap-server-notls",
            Command::new("coap-server-notls").args(["-A", host, "-p", &port.to_string()]),
        );
        let addr = SocketAddr::new(host.parse().unwrap(), port);
        let deadline = Instant::now() + START;
        while Instant::now() < deadline && !p.exited() {
            if answers_ping(addr) {
                return (p, port);
            }
        }
        eprintln!(
            "coap-server-notls on port {port} did not come up; trying another\n{}",
            p.dump()
        );
    }
    panic!("coap-server-notls did not start on {host}");
}

/// `backoffd proxy --listen <listen> <args>` at debug level; it, and its CoAP address.
pub fn proxy(listen: &str, args: &[&str]) -> (Proxy, SocketAddr) {
    let p = daemon::proxy("debug", &[&["--listen", listen], args].concat());
    let coap = p.coap;
    (p, coap)
}

/// `backoffd proxy` with `--http-listen 127.0.0.1:0` and `args`; it, and its HTTP address.
pub fn http_proxy(args: &[&str]) -> (Proxy, SocketAddr) {
    let listen = ["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"];
    let p = daemon::proxy("debug", &[&listen, args].concat());
    let http = p.http.expect("an HTTP listener");
    (p, http)
}

/// An observing relay in front of `target` that logs every datagram on its stderr. Returns
/// it and the address to send to instead of `target`.
pub fn tap(name: &str, target: SocketAddr) -> (Proc, SocketAddr) {
    relay(name, target, &["--loss", "0"])
}

/// A relay in front of `target` that drops each datagram with probability `loss` (seeded),
/// the same bytes (a retransmission) at most twice, and logs every datagram.
pub fn lossy_relay(name: &str, target: SocketAddr, loss: f64, seed: u64) -> (Proc, SocketAddr) {
    let (loss, seed) = (loss.to_string(), seed.to_string());
    relay(
        name,
        target,
        &[
            "--loss",
            &loss,
            "--seed",
            &seed,
            "--max-drops-per-datagram",
            "2",
        ],
    )
}

pub fn relay(name: &str, target: SocketAddr, args: &[&str]) -> (Proc, SocketAddr) {
    let host = if target.is_ipv4() { "127.0.0.1" } else { "::1" };
    let mut p = Proc::spawn(
        name,
        Command::new(&peers().python)
            .arg(script("lossy_relay.py"))
            .args(["--host", host, "--target", &target.to_string(), "--trace"])
            .args(args),
    );
    let port: u16 = p.wait_stdout("RELAY ", START).parse().unwrap();
    (p, SocketAddr::new(target.ip(), port))
}

/// One datagram seen by a tap.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// Toward the relay's target (e.g. client -> proxy), else back toward the source.
    pub forward: bool,
    pub dropped: bool,
    pub ty: String,
    pub code: String,
    pub mid: u16,
    pub token: String,
    /// The port of the source the relay serves (the client, for a tap in front of the proxy).
    pub peer: u16,
}

impl Seen {
    pub fn is(&self, forward: bool, ty: &str, code: &str) -> bool {
        self.forward == forward && self.ty == ty && self.code == code
    }
}

/// Parses the tap's `--trace` lines: `<t> -> pass CON 0.01 mid=1 tok=ab len=20 peer=4711`.
pub fn seen(tap: &Proc) -> Vec<Seen> {
    tap.stderr()
        .iter()
        .filter_map(|line| {
            let w: Vec<&str> = line.split_whitespace().collect();
            if w.len() < 9 || !(w[1] == "->" || w[1] == "<-") {
                return None;
            }
            Some(Seen {
                forward: w[1] == "->",
                dropped: w[2] == "DROP",
                ty: w[3].to_string(),
                code: w[4].to_string(),
                mid: w[5].strip_prefix("mid=")?.parse().ok()?,
                token: w[6].strip_prefix("tok=")?.to_string(),
                peer: w[8].strip_prefix("peer=")?.parse().ok()?,
            })
        })
        .collect()
}

/// Waits until what the tap logged satisfies `pred` (its log trails the relay a little);
/// returns everything it logged.
pub fn wait_seen(tap: &Proc, what: &str, pred: impl Fn(&[Seen]) -> bool) -> Vec<Seen> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let all = seen(tap);
        if pred(&all) {
            return all;
        }
        if Instant::now() >= deadline {
            panic!("{} never showed {what}; it saw:\n{all:#?}", tap.name);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ------------------------------------------------------------------------------------------
// Clients, and what they wrote.
// ------------------------------------------------------------------------------------------

/// The sha256 of a file, in hex (`sha256sum`, as a user would check it).
pub fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// A file's text, empty if it is missing (a client that got nothing wrote none).
pub fn text(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

/// Runs tests/interop/aiocoap_client.py to completion (success required) within `timeout`.
pub fn aiocoap_client(args: &[&str], timeout: Duration) -> Proc {
    aiocoap_client_with_env(args, timeout, &[])
}

/// [`aiocoap_client`] with environment variables set (`SSL_CERT_FILE` for a CA to trust).
pub fn aiocoap_client_with_env(args: &[&str], timeout: Duration, env: &[(&str, &str)]) -> Proc {
    let mut p = Proc::spawn(
        &format!("aiocoap client {}", args.join(" ")),
        Command::new(&peers().python)
            .envs(env.iter().copied())
            .arg(script("aiocoap_client.py"))
            .args([
                "--timeout",
                &(timeout.as_secs_f64() - 1.0).max(1.0).to_string(),
            ])
            .args(args),
    );
    p.finish_ok(timeout);
    p
}

/// Starts `coap-client-notls <args>` (`-B` bounds its own wait).
pub fn coap_client(args: &[&str]) -> Proc {
    peers();
    Proc::spawn(
        &format!("coap-client-notls {}", args.join(" ")),
        Command::new("coap-client-notls").args(args),
    )
}

/// Runs `coap-client-notls <args>` to a successful exit within `timeout`.
pub fn coap_client_ok(args: &[&str], timeout: Duration) -> Proc {
    let mut p = coap_client(args);
    p.finish_ok(timeout);
    p
}
