//! Arbitrary text as a `serve` config file: parse never panics, and sections turn into flag
//! arguments without panicking either.
#![no_main]

use backoffd::cli::config_file::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(sections) = parse(text, &["proxy", "reconnect", "metrics"]) {
        for s in &sections {
            let _ = s.to_args(&["forward"]);
        }
    }
});
