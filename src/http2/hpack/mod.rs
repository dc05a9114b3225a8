//! HPACK header compression for HTTP/2 (RFC 7541), std only and sans-IO.
//!
//! [`Decoder`] turns one complete header block (HEADERS plus any CONTINUATION
//! fragments, already concatenated by the framing layer) into owned
//! [`Header`]s; [`Encoder`] appends one header block to a buffer. Each keeps
//! the dynamic table of one direction of the connection (§2.2), so a
//! connection owns exactly one of each and feeds them every block in order.
//!
//! Any [`HpackError`] is a connection error of type COMPRESSION_ERROR
//! (RFC 9113 §4.3): the dynamic table is then out of sync with the peer.

mod decoder;
mod encoder;
mod huffman;
mod integer;
mod table;
#[cfg(test)]
mod tests;

use std::fmt;

pub use decoder::Decoder;
pub use encoder::Encoder;

/// A header field to send, borrowed: what [`Encoder::encode`] and
/// `Connection::send_headers` take, so callers need not copy static names.
pub type Field<'a> = (&'a [u8], &'a [u8]);

/// A header field owned: one the decoder produced, or one kept to be sent
/// later (trailers, gRPC answers). `sensitive` is set when the peer used the
/// never-indexed representation (§6.2.3), which intermediaries must keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Field name octets; lower-case in HTTP/2, pseudo-headers start with `:`.
    pub name: Vec<u8>,
    /// Field value octets.
    pub value: Vec<u8>,
    /// Sent as never-indexed (§6.2.3): must not enter any compression table.
    pub sensitive: bool,
}

impl Header {
    /// An ordinary (indexable) field.
    pub fn new(name: &[u8], value: impl Into<Vec<u8>>) -> Header {
        Header {
            name: name.to_vec(),
            value: value.into(),
            sensitive: false,
        }
    }

    /// The borrowed form, to send.
    pub fn field(&self) -> Field<'_> {
        (&self.name, &self.value)
    }
}

/// Why a header block was rejected; one variant per rule of RFC 7541.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HpackError {
    /// A prefix integer exceeds 2^32-1 (§5.1, §8.1).
    IntegerOverflow,
    /// The block ends inside a representation (§5.1, §5.2).
    Truncated,
    /// Index 0 or past the end of the dynamic table (§2.3.3).
    InvalidIndex,
    /// A Huffman string contains the EOS symbol (§5.2).
    HuffmanEos,
    /// Huffman padding longer than 7 bits (§5.2).
    HuffmanPadding,
    /// Huffman padding that is not a prefix of EOS, i.e. not all ones (§5.2).
    HuffmanInvalid,
    /// A size update above our SETTINGS_HEADER_TABLE_SIZE (§6.3).
    TableSizeUpdateTooLarge,
    /// A size update after the first field of a block (§4.2).
    TableSizeUpdateNotAtStart,
    /// Our setting shrank but the next block did not open with an update (§4.2).
    TableSizeUpdateMissing,
    /// The decoded list exceeds SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 §6.5.2).
    HeaderListTooLarge,
    /// A string literal longer than any header that fits the list limit.
    StringTooLong,
}

impl fmt::Display for HpackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::IntegerOverflow => "hpack: integer overflow",
            Self::Truncated => "hpack: truncated header block",
            Self::InvalidIndex => "hpack: invalid table index",
            Self::HuffmanEos => "hpack: huffman string contains EOS",
            Self::HuffmanPadding => "hpack: huffman padding longer than 7 bits",
            Self::HuffmanInvalid => "hpack: huffman padding is not all ones",
            Self::TableSizeUpdateTooLarge => "hpack: table size update above the limit",
            Self::TableSizeUpdateNotAtStart => "hpack: table size update after a field",
            Self::TableSizeUpdateMissing => "hpack: required table size update missing",
            Self::HeaderListTooLarge => "hpack: header list too large",
            Self::StringTooLong => "hpack: string literal too long",
        })
    }
}

impl std::error::Error for HpackError {}
