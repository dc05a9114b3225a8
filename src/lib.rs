//! backoffd: a single-threaded mio daemon with a CoAP forwarding proxy, gRPC's
//! connection-backoff interop server and client, and the hashed timer wheel they run on.

pub mod time;
pub mod timer;
