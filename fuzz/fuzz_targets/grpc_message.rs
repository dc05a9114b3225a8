//! Length-prefixed gRPC messages in arbitrary fragments: never panics; whatever is decoded
//! respects the size limit.
#![no_main]

use backoffd::grpc::message::MessageDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&piece, bytes)) = data.split_first() else {
        return;
    };
    let mut decoder = MessageDecoder::new(4096, piece & 1 == 1);
    for chunk in bytes.chunks(usize::from(piece >> 1).max(1)) {
        if decoder.push(chunk).is_err() {
            return;
        }
        while let Some(m) = decoder.pop() {
            assert!(m.payload.len() <= 4096);
        }
    }
    let _ = decoder.finish();
});
