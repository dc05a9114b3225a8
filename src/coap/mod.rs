//! CoAP (RFC 7252) message codec for the forwarding proxy.
//!
//! [`Message`] validates a datagram once in [`Message::parse`], so its accessors cannot
//! fail; [`MessageBuilder`] writes the canonical encoding into a caller-owned buffer, so
//! re-encoding a parsed message reproduces it byte for byte. Nothing here panics on input.

/// Declares an error enum whose variant texts serve as both its docs and its `Display`.
macro_rules! error_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        pub enum $name { $(#[doc = $text] $variant,)* }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(match self { $(Self::$variant => $text,)* })
            }
        }

        impl std::error::Error for $name {}
    };
}
#[cfg(feature = "tcp")]
pub(crate) use error_enum;

mod builder;
mod code;
pub mod echo;
mod message;
pub mod option;
pub mod params;

pub use builder::{empty_ack, ping, rewrite, rst, EncodeError, MessageBuilder, MAX_OPTION_LEN};
pub use code::Code;
pub use message::{peek_header, FormatError, Message, MessageType, OptionIter, MAX_TOKEN_LEN};
