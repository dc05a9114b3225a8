//! Header blocks against one decoder (its dynamic table carries over): never panics, and the
//! output respects the header list limit.
#![no_main]

use backoffd::http2::hpack::Decoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut decoder = Decoder::new(4096, 16 * 1024);
    let mut out = Vec::new();
    // The first byte splits the input into consecutive blocks.
    let Some((&split, blocks)) = data.split_first() else {
        return;
    };
    for block in blocks.chunks(usize::from(split).max(1)) {
        out.clear();
        if decoder.decode(block, &mut out).is_err() {
            return;
        }
        let size: usize = out.iter().map(|h| h.name.len() + h.value.len() + 32).sum();
        assert!(size <= 16 * 1024);
    }
});
