//! Arbitrary command lines through the real flag parser and every subcommand's parsing and
//! validation (`cli::parse_only`: nothing is bound, read or run), plus each word
//! through the duration parser. Errors are fine; a panic is a bug.
//!
//! Input: UTF-8 text. With a NUL byte in it, words are split on NUL (so a word may be empty or
//! contain spaces); otherwise on whitespace. The first word is the subcommand.
#![no_main]

// The command line is the binary's, not the library's: built in here from its source.
#[allow(dead_code)]
#[path = "../../src/cli/mod.rs"]
mod cli;

use backoffd::time::parse_duration;
use cli::parse_only;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let words: Vec<&str> = if text.contains('\0') {
        text.split('\0').collect()
    } else {
        text.split_whitespace().collect()
    };
    for w in &words {
        let _ = parse_duration(w);
    }
    let mut argv = vec!["backoffd".to_string()];
    argv.extend(words.iter().map(|w| w.to_string()));
    let _ = parse_only(&argv);
});
