//! coaps interop (RFC 7252 §9, issue 28): the real `backoffd proxy --listen-dtls` between
//! two independent DTLS stacks and a plain CoAP origin.
//!
//! Clients: Debian's libcoap 4.3.1 built on OpenSSL (`coap-client-openssl`) and on GnuTLS
//! (`coap-client-gnutls`), and aiocoap 0.4.17 over tinydtls (the DTLSSocket package),
//! installed by tests/interop/setup.sh. Origin: the aiocoap server of
//! tests/interop/aiocoap_server.py, over plain CoAP. Keys: a PSK (`-k KEY -u IDENTITY`), and
//! certificates made here with rcgen (a CA, a server certificate for 127.0.0.1, a client
//! certificate).
//!
//! | test                                                  | stacks           |
//! |-------------------------------------------------------|------------------|
//! | psk_get_post_blockwise_and_observe (one per stack)    | openssl, gnutls  |
//! | a_wrong_key_gets_nothing_and_the_next_client_is_served | openssl, gnutls  |
//! | certificates_are_verified_by_the_client (one per stack)| openssl, gnutls  |
//! | a_client_certificate_is_required_with_dtls_client_ca  | openssl          |
//! | coaps_alone_opens_no_plain_port                        | notls, openssl   |
//! | a_flood_of_client_hellos_is_answered_statelessly_...   | rtc-dtls hellos, openssl |
//! | aiocoap_over_dtls_get_post_blockwise_and_observe      | aiocoap (tinydtls) |
//! | aiocoap_with_a_wrong_key_gets_nothing_and_the_next_... | aiocoap (tinydtls) |
//! | upstream_psk_get_put_blockwise_and_observe (per stack) | openssl, gnutls servers |
//! | a_wrong_upstream_key_gets_5_02                         | openssl server   |
//! | a_restarted_upstream_gets_a_new_session                | openssl server   |
//! | the_upstream_certificate_is_verified                   | openssl server   |
//! | a_flood_of_verified_hellos_leaves_room_for_a_psk_client | rtc-dtls hellos, openssl |
//! | a_cookieless_hello_from_a_live_session_s_address_...   | rtc-dtls         |
//! | a_sec1_certificate_key_serves_coaps                    | openssl          |

#![cfg(feature = "dtls")]

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod common;
mod peers;

#[path = "coaps_interop/aiocoap_dtls.rs"]
mod aiocoap_dtls;
#[path = "coaps_interop/cases.rs"]
mod cases;
#[path = "coaps_interop/certs.rs"]
mod certs;
#[path = "coaps_interop/flood.rs"]
mod flood;
#[path = "coaps_interop/hostile.rs"]
mod hostile;
#[path = "coaps_interop/hostile_cases.rs"]
mod hostile_cases;
#[path = "coaps_interop/upstream.rs"]
mod upstream;

use peers::*;

const T20: Duration = Duration::from_secs(20);
const IDENTITY: &str = "client1";
const KEY: &str = "secretkey";

/// A DTLS build of libcoap's client.
#[derive(Clone, Copy, Debug)]
enum Stack {
    Openssl,
    Gnutls,
}

impl Stack {
    fn client(self) -> &'static str {
        match self {
            Stack::Openssl => "coap-client-openssl",
            Stack::Gnutls => "coap-client-gnutls",
        }
    }
}

/// Runs `coap-client-<stack> <args>` within `timeout` (`-B` bounds its own wait); its exit
/// status says little (4.3.1 exits 0 after a failed handshake), so callers check its output.
fn coaps_client(stack: Stack, args: &[&str], timeout: Duration) -> Proc {
    peers();
    let mut p = Proc::spawn(
        &format!("{} {}", stack.client(), args.join(" ")),
        Command::new(stack.client()).args(args),
    );
    if p.wait_exit(timeout).is_none() {
        panic!("{} did not finish within {timeout:?}\n{}", p.name, p.dump());
    }
    p
}

/// The PSK flags of a libcoap client, `key` as given.
fn psk(key: &str) -> Vec<String> {
    ["-k", key, "-u", IDENTITY].map(String::from).to_vec()
}

/// The proxy's PSK flags: the key written to a file under `dir`.
fn proxy_psk(dir: &Path) -> Vec<String> {
    let file = dir.join("psk.key");
    std::fs::write(&file, KEY).unwrap();
    [
        "--psk-identity",
        IDENTITY,
        "--psk-key-file",
        file.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

/// `backoffd proxy --listen-dtls 127.0.0.1:0 <args>` in front of `upstream`; its coaps address.
fn coaps_proxy(upstream: u16, args: &[String]) -> (Proxy, SocketAddr) {
    let upstream = format!("127.0.0.1:{upstream}");
    let mut argv = vec!["--listen-dtls", "127.0.0.1:0", "--upstream", &upstream];
    argv.extend(args.iter().map(String::as_str));
    let p = daemon::proxy("debug", &argv);
    let coaps = p.coaps.expect("a coaps listener");
    (p, coaps)
}
