//! Arbitrary text as a `serve` config file: parse never panics, sections turn into flag
//! arguments without panicking either, and the whole file validates like
//! `backoffd serve --config FILE --check-config` (flag parsing, proxy/reconnect/metrics
//! configuration) without panicking.
#![no_main]

// The command line is the binary's, not the library's: built in here from its source.
#[allow(dead_code)]
#[path = "../../src/cli/mod.rs"]
mod cli;

use cli::check_config_text;
use cli::config_file::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(sections) = parse(text, &["proxy", "reconnect", "metrics"]) {
        for s in &sections {
            let _ = s.to_args(&["forward"]);
        }
        let _ = check_config_text("fuzz.conf", text);
    }
});
