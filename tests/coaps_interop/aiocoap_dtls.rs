//! aiocoap's client over DTLS (its tinydtls transport, the DTLSSocket package) through
//! `--listen-dtls`: a third DTLS stack, the one that insists on the renegotiation marker
//! (RFC 5746) and extended master secret (RFC 7627) in the ServerHello.

use super::*;

/// tests/interop/aiocoap_client.py with `--dtls-psk IDENTITY:key`; its process, finished.
fn aiocoap_dtls(key: &str, args: &[&str]) -> Proc {
    let psk = format!("{IDENTITY}:{key}");
    let mut p = Proc::spawn(
        &format!("aiocoap client (tinydtls) {}", args.join(" ")),
        Command::new(&peers().python)
            .arg(script("aiocoap_client.py"))
            .args(["--timeout", "15", "--dtls-psk", &psk])
            .args(args),
    );
    if p.wait_exit(T20).is_none() {
        panic!("{} did not finish within {T20:?}\n{}", p.name, p.dump());
    }
    p
}

/// The `CODE d.dd` line of an aiocoap_client.py run.
fn code(p: &Proc) -> String {
    p.stdout()
        .iter()
        .find_map(|l| l.strip_prefix("CODE ").map(str::to_string))
        .unwrap_or_else(|| format!("no answer\n{}", p.dump()))
}

/// GET, POST read back byte for byte, a 4 KiB block-wise GET (sha256 checked) and an Observe
/// of 3 notifications, all from aiocoap over DTLS with a PSK.
#[test]
fn aiocoap_over_dtls_get_post_blockwise_and_observe() {
    let dir = scratch("coaps-aiocoap");
    let (_origin, port) = aiocoap_server();
    let (_proxy, coaps) = coaps_proxy(port, &proxy_psk(&dir));
    let uri = |path: &str| format!("coaps://{coaps}/{path}");

    let hello = aiocoap_dtls(KEY, &["request", "GET", &uri("hello")]);
    assert!(code(&hello).starts_with("2.05"), "{}", hello.dump());
    assert!(
        hello.stdout_text().contains("TEXT hello"),
        "{}",
        hello.dump()
    );

    let sent = dir.join("post.bin");
    let body: Vec<u8> = (0..=255u8).chain((0..=255).rev()).collect();
    std::fs::write(&sent, &body).unwrap();
    let post = aiocoap_dtls(
        KEY,
        &[
            "request",
            "POST",
            &uri("upload"),
            "--in",
            sent.to_str().unwrap(),
        ],
    );
    assert!(code(&post).starts_with("2.04"), "{}", post.dump());
    let back = dir.join("back.bin");
    let get = [
        "request",
        "GET",
        &uri("upload"),
        "--out",
        back.to_str().unwrap(),
    ];
    aiocoap_dtls(KEY, &get);
    assert_eq!(std::fs::read(&back).unwrap(), body, "POST then GET");

    let big = dir.join("big.bin");
    aiocoap_dtls(
        KEY,
        &[
            "request",
            "GET",
            &uri("big"),
            "--out",
            big.to_str().unwrap(),
        ],
    );
    let want = dir.join("want.bin");
    std::fs::write(&want, big_body()).unwrap();
    assert_eq!(sha256(&big), sha256(&want), "4 KiB block-wise GET");

    let observed = aiocoap_dtls(KEY, &["observe", &uri("clock"), "--count", "3"]);
    let values: Vec<u64> = observed
        .stdout()
        .iter()
        .filter_map(|l| l.strip_prefix("NOTIFY ")?.trim().parse().ok())
        .collect();
    assert!(values.len() >= 3, "Observe: {}", observed.dump());
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
}

/// aiocoap with a wrong key gets no answer (its handshake fails), and aiocoap with the right
/// key, right after it, is served.
#[test]
fn aiocoap_with_a_wrong_key_gets_nothing_and_the_next_is_served() {
    let dir = scratch("coaps-aiocoap-wrong");
    let (_origin, port) = aiocoap_server();
    let (_proxy, coaps) = coaps_proxy(port, &proxy_psk(&dir));
    let uri = format!("coaps://{coaps}/hello");
    let wrong = aiocoap_dtls("not-the-key", &["request", "GET", &uri]);
    assert!(!wrong.stdout_text().contains("CODE"), "{}", wrong.dump());
    let good = aiocoap_dtls(KEY, &["request", "GET", &uri]);
    assert!(code(&good).starts_with("2.05"), "{}", good.dump());
}
