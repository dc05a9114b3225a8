//! A real browser through the HTTP-to-CoAP cross-proxy (issue 15; RFC 8075): headless Chromium
//! (Debian's `chromium`, installed by tests/interop/setup_browser.sh) loads
//! tests/interop/browser_page.html from one origin, and the page reads aiocoap's resources
//! through the proxy on another origin: `fetch()` for `/hello` and `/json`, `EventSource` for
//! the observable `/clock`. The test reads the DOM Chromium dumps, and keeps a screenshot.
//!
//! How the dump waits for the page: with `--virtual-time-budget`, Chromium's virtual time stands
//! still while a network fetch is pending. The page starts its EventSource and both fetches in
//! one task and closes the EventSource only when it has everything, so the budget runs out (at
//! once) only after that; then `--dump-dom` and `--screenshot` run and Chromium exits. A stream
//! that stays open without events holds it forever: the hard timeout below kills its process
//! group. Everything binds loopback; every child is guarded (tests/peers).
#![cfg(feature = "http")]

mod common;
mod peers;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use peers::*;

const T20: Duration = Duration::from_secs(20);
/// Chromium's whole run, page load to exit; it takes about 1 to 2 s.
const CHROMIUM_LIMIT: Duration = Duration::from_secs(60);

/// Runs setup_browser.sh once per test process; every test fails with its message if it could
/// not install Chromium.
fn browser() {
    static BROWSER: OnceLock<Result<(), String>> = OnceLock::new();
    let installed = BROWSER.get_or_init(|| {
        // The lock setup.sh takes (peers() uses the default venv), so that the two never run
        // apt-get at once.
        let lock = Path::new(MANIFEST_DIR).join("target/interop-venv.lock");
        let mut setup = Proc::spawn(
            "setup_browser.sh",
            Command::new("bash")
                .arg(script("setup_browser.sh"))
                .arg(&lock),
        );
        // A first install runs apt-get (about 25 s); a later one takes ~0.2 s.
        let status = setup.wait_exit(Duration::from_secs(900));
        let log = setup.stderr().join("\n");
        match status {
            Some(s) if s.success() => {
                eprintln!("{}", log.lines().last().unwrap_or_default());
                Ok(())
            }
            Some(s) => Err(format!("setup_browser.sh failed ({s}):\n{log}")),
            None => Err(format!(
                "setup_browser.sh did not finish within 900 s:\n{log}"
            )),
        }
    });
    if let Err(e) = installed {
        panic!("{e}");
    }
}

/// Python's `http.server` on 127.0.0.1 and a kernel-chosen port, serving `dir` (the page's
/// origin); it, and the port.
fn static_server(dir: &Path) -> (Proc, u16) {
    let mut p = Proc::spawn(
        "page server",
        Command::new(&peers().python)
            .args([
                "-u",
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                "--directory",
            ])
            .arg(dir)
            .arg("0"),
    );
    let line = p.wait_stdout("Serving HTTP on 127.0.0.1 port ", START);
    let port = line.split_whitespace().next().unwrap().parse().unwrap();
    (p, port)
}

/// What one Chromium run left: the DOM it dumped, and the screenshot.
struct PageView {
    dom: String,
    screenshot: PathBuf,
}

/// Headless Chromium with a fresh profile under `dir` loads `url`, and dumps the DOM and a
/// screenshot when the page has no fetch pending any more.
fn chromium(dir: &Path, url: &str) -> PageView {
    browser();
    // Everything this run of Chromium writes, its crash handler's database included, and
    // nothing in ~/.config or ~/.cache: a fresh profile per run, and a path that names its
    // processes (see `processes_using`).
    let own = dir.join("chromium");
    let screenshot = dir.join("page.png");
    let mut p = Proc::spawn(
        "chromium",
        Command::new("chromium")
            .env("XDG_CONFIG_HOME", own.join("config"))
            .env("XDG_CACHE_HOME", own.join("cache"))
            .env("BREAKPAD_DUMP_LOCATION", own.join("crash"))
            .args([
                "--headless=new",
                // As root in a container Chromium's sandbox cannot start.
                "--no-sandbox",
                "--disable-gpu",
                &format!("--user-data-dir={}", own.join("profile").display()),
                // Loopback only: no proxy, no name resolution, no background traffic.
                "--no-proxy-server",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--no-default-browser-check",
                // Virtual time: a budget that only runs while no fetch is pending (see the top).
                "--virtual-time-budget=10000",
                "--window-size=800,600",
                &format!("--screenshot={}", screenshot.display()),
                "--dump-dom",
                url,
            ]),
    );
    let started = Instant::now();
    let status = p.wait_exit(CHROMIUM_LIMIT);
    // The crash handlers run in process groups of their own, so killing chromium's group on a
    // timeout does not reach them: they are found by their command line.
    let left = kill_processes_using(&own);
    match status {
        Some(s) if s.success() => {}
        Some(s) => panic!("chromium failed ({s})\n{}", p.dump()),
        None => panic!(
            "chromium did not finish within {CHROMIUM_LIMIT:?}, killed: the page kept a fetch or \
             its EventSource open (fewer than 3 events?)\n{}",
            p.dump()
        ),
    }
    assert!(
        left.is_empty(),
        "chromium exited but left processes behind (now killed):\n{}",
        left.join("\n")
    );
    eprintln!(
        "chromium ran {:.1} s; screenshot: {}",
        started.elapsed().as_secs_f64(),
        screenshot.display()
    );
    let _ = std::fs::remove_dir_all(&own);
    PageView {
        dom: p.stdout_text(),
        screenshot,
    }
}

/// Every live process with `path` in its command line (Chromium passes its
/// `--user-data-dir` on to its helpers; its crash handlers get `--database=<path>/crash`).
/// Zombies have an empty command line: they are dead, and their new parent reaps them.
fn processes_using(path: &Path) -> Vec<(i32, String)> {
    let needle = path.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Gives the processes using `path` 5 s to exit after Chromium did, then kills the rest (they
/// are this run's: the path is). Returns those it had to kill.
fn kill_processes_using(path: &Path) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_using(path);
        if left.is_empty() {
            return Vec::new();
        }
        if Instant::now() >= deadline {
            for (pid, _) in &left {
                // SAFETY: kill(2) on a process that our own chromium started.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            return left
                .iter()
                .map(|(pid, cmd)| format!("{pid}: {cmd}"))
                .collect();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The page's `<li class="event" data-id=".." data-data="..">` items: (id, data).
fn events(dom: &str) -> Vec<(u64, String)> {
    let attr = |item: &str, name: &str| -> Option<String> {
        let start = item.find(&format!("{name}=\""))? + name.len() + 2;
        Some(item[start..start + item[start..].find('"')?].to_string())
    };
    (dom.split("<li class=\"event\"").skip(1))
        .filter_map(|item| {
            Some((
                attr(item, "data-id")?.parse().ok()?,
                attr(item, "data-data")?,
            ))
        })
        .collect()
}

/// A scratch dir with the page in it, served from a second origin.
fn serve_page(test: &str) -> (PathBuf, Proc, u16) {
    let dir = scratch(test);
    let www = dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::copy(script("browser_page.html"), www.join("page.html")).unwrap();
    let (server, port) = static_server(&www);
    (dir, server, port)
}

#[test]
fn a_browser_page_fetches_a_coap_resource_and_follows_live_notifications() {
    peers();
    browser();
    let (dir, _pages, page_port) = serve_page("browser");
    let (mut coap, coap_port) = aiocoap_server_with(&["--tick", "0.2"]);
    let upstream = format!("127.0.0.1:{coap_port}");
    let page_origin = format!("http://127.0.0.1:{page_port}");
    let (_proxy, http) = http_proxy(&["--upstream", &upstream, "--http-cors", &page_origin]);
    let url = format!("{page_origin}/page.html?proxy=http://{http}");

    let view = chromium(&dir, &url);
    let (dom, shot) = (&view.dom, view.screenshot.display());
    let context = format!("screenshot {shot}; DOM:\n{dom}");
    assert!(
        dom.contains(r#"<span id="hello" data-ok="yes">hello from aiocoap</span>"#),
        "fetch() read /hello through the proxy; {context}"
    );
    assert!(
        dom.contains(r#"<span id="json" data-ok="yes">21.5</span>"#),
        "fetch() read /json's {{\"t\": 21.5}}; {context}"
    );
    let seen = events(dom);
    assert!(
        seen.len() >= 3,
        "3 EventSource messages: {seen:?}; {context}"
    );
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0),
        "lastEventId (the Observe value) rises: {seen:?}; {context}"
    );
    let ticks: Vec<u64> = seen.iter().map(|(_, d)| d.parse().unwrap()).collect();
    assert!(
        ticks.windows(2).all(|w| w[0] < w[1]),
        "the clock ticks: {ticks:?}"
    );
    assert!(dom.contains(r#"<div id="done">"#), "{context}");
    assert!(
        dom.contains(r#"<pre id="errors"></pre>"#),
        "no error; {context}"
    );
    let png = std::fs::read(&view.screenshot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot at {shot}");
    // The page closed its EventSource and Chromium is gone: the observation ends upstream.
    coap.wait_stdout_count("OBSERVERS 0", 1, T20);
}

#[test]
fn without_http_cors_the_page_from_another_origin_reads_nothing() {
    peers();
    browser();
    let (dir, _pages, page_port) = serve_page("browser-no-cors");
    let (_coap, coap_port) = aiocoap_server_with(&["--tick", "0.2"]);
    let upstream = format!("127.0.0.1:{coap_port}");
    let (_proxy, http) = http_proxy(&["--upstream", &upstream]);
    let url = format!("http://127.0.0.1:{page_port}/page.html?proxy=http://{http}");

    let view = chromium(&dir, &url);
    let dom = &view.dom;
    assert!(
        dom.contains("fetch /hello: TypeError: Failed to fetch"),
        "{dom}"
    );
    assert!(
        dom.contains("fetch /json: TypeError: Failed to fetch"),
        "{dom}"
    );
    assert!(events(dom).is_empty(), "{dom}");
    assert!(!dom.contains(r#"<div id="done">"#), "{dom}");
}

/// Issue 25, finding 4: an origin whose notifications end lines with bare CRs cannot add
/// fields or events to the stream a browser reads. EventSource ends a line at CR, LF or CRLF
/// (WHATWG HTML, "event stream interpretation"); the proxy splits the payload the same way and
/// prefixes every piece with `data:`, so each notification stays one message event whose data
/// is the payload with its line ends made LFs, and its id stays the Observe value.
#[test]
fn bare_crs_in_a_notification_add_no_event_field_or_id_in_a_browser() {
    peers();
    browser();
    let (dir, _pages, page_port) = serve_page("browser-bare-cr");
    let (_coap, coap_port) = aiocoap_server_with(&["--tick", "0.2"]);
    let upstream = format!("127.0.0.1:{coap_port}");
    let page_origin = format!("http://127.0.0.1:{page_port}");
    let (_proxy, http) = http_proxy(&["--upstream", &upstream, "--http-cors", &page_origin]);
    let url = format!("{page_origin}/page.html?proxy=http://{http}&stream=/crclock");

    let view = chromium(&dir, &url);
    let dom = &view.dom;
    let seen = events(dom);
    assert!(seen.len() >= 3, "3 message events: {seen:?}; DOM:\n{dom}");
    assert!(dom.contains(r#"<span id="admin">0</span>"#), "{dom}");
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0) && seen.iter().all(|(id, _)| *id != 999),
        "lastEventId is the Observe value, never the injected 999: {seen:?}"
    );
    let injected = "\nid: 999\nretry: 86400000\nevent: admin\n\ndata: forged-event";
    for (_, data) in &seen {
        let tick = data.strip_suffix(injected);
        assert!(
            tick.is_some_and(|t| t.parse::<u64>().is_ok()),
            "one event per notification, its whole payload as data: {data:?}"
        );
    }
}
