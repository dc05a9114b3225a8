//! Header block decoding (RFC 7541 §3, §6).

use super::table::{entry_size, Table};
use super::{huffman, integer, Header, HpackError};

/// Decodes the header blocks a peer sends on one connection, in order.
///
/// After any error the dynamic table is out of sync with the peer's encoder
/// and the decoder must not be used again: the caller closes the connection
/// with COMPRESSION_ERROR (RFC 9113 §4.3).
#[derive(Clone, Debug)]
pub struct Decoder {
    table: Table,
    /// Our SETTINGS_HEADER_TABLE_SIZE: the most a size update may ask (§6.3).
    max_allowed: usize,
    /// Our setting shrank below the table's size: the next block must
    /// open with a size update (§4.2).
    update_required: bool,
    /// Our SETTINGS_MAX_HEADER_LIST_SIZE, in §4.1 entry-size units.
    max_list_size: usize,
}

impl Decoder {
    /// `max_table_size` is our SETTINGS_HEADER_TABLE_SIZE as the peer knows
    /// it (4096 until our SETTINGS are acknowledged, RFC 9113 §6.5.2); it is
    /// also the table's initial size. `max_header_list_size` bounds the
    /// decoded list, and so the memory one block can make us allocate.
    pub fn new(max_table_size: usize, max_header_list_size: usize) -> Self {
        Self {
            table: Table::new(max_table_size),
            max_allowed: max_table_size,
            update_required: false,
            max_list_size: max_header_list_size,
        }
    }

    /// Applies a new SETTINGS_HEADER_TABLE_SIZE of ours once the peer has
    /// acknowledged it. If it is below the current table size, the peer's
    /// next block must start with a size update (§4.2).
    pub fn set_max_allowed_table_size(&mut self, size: usize) {
        self.max_allowed = size;
        self.update_required |= size < self.table.max_size();
    }

    /// Decodes one complete header block, appending its fields to `out`. On
    /// error `out` is left as it was and the decoder is unusable (see type).
    pub fn decode(&mut self, block: &[u8], out: &mut Vec<Header>) -> Result<(), HpackError> {
        let start = out.len();
        let result = self.decode_block(block, out);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn decode_block(&mut self, mut src: &[u8], out: &mut Vec<Header>) -> Result<(), HpackError> {
        while src.first().is_some_and(|&b| b & 0xe0 == 0x20) {
            src = self.size_update(src)?;
        }
        if self.update_required {
            return Err(HpackError::TableSizeUpdateMissing);
        }
        let mut list_size = 0usize;
        while !src.is_empty() {
            let (header, rest) = self.field(src)?;
            list_size = list_size.saturating_add(entry_size(&header.name, &header.value));
            if list_size > self.max_list_size {
                return Err(HpackError::HeaderListTooLarge);
            }
            out.push(header);
            src = rest;
        }
        Ok(())
    }

    /// Dynamic table size update (§6.3), only valid at the start of a block.
    fn size_update<'a>(&mut self, src: &'a [u8]) -> Result<&'a [u8], HpackError> {
        let (size, n) = integer::decode(src, 5)?;
        if size > self.max_allowed {
            return Err(HpackError::TableSizeUpdateTooLarge);
        }
        self.table.set_max_size(size);
        self.update_required = false;
        Ok(&src[n..])
    }

    /// One field representation: indexed (§6.1) or literal (§6.2).
    fn field<'a>(&mut self, src: &'a [u8]) -> Result<(Header, &'a [u8]), HpackError> {
        let first = *src.first().ok_or(HpackError::Truncated)?;
        if first & 0x80 != 0 {
            let (index, n) = integer::decode(src, 7)?;
            let (name, value) = self.entry(index)?;
            let (name, value) = (name.to_vec(), value.to_vec());
            return Ok((
                Header {
                    name,
                    value,
                    sensitive: false,
                },
                &src[n..],
            ));
        }
        if first & 0xe0 == 0x20 {
            return Err(HpackError::TableSizeUpdateNotAtStart);
        }
        self.literal(src, first)
    }

    /// Literal field (§6.2): `01` incremental indexing (6-bit prefix), `0000`
    /// without indexing, `0001` never indexed (4-bit prefix).
    fn literal<'a>(&mut self, src: &'a [u8], first: u8) -> Result<(Header, &'a [u8]), HpackError> {
        let indexing = first & 0x40 != 0;
        let (index, n) = integer::decode(src, if indexing { 6 } else { 4 })?;
        let (name, rest) = match index {
            0 => self.string(&src[n..])?,
            _ => (self.entry(index)?.0.to_vec(), &src[n..]),
        };
        let (value, rest) = self.string(rest)?;
        if indexing {
            self.table.insert(name.clone(), value.clone());
        }
        let sensitive = !indexing && first & 0x10 != 0;
        Ok((
            Header {
                name,
                value,
                sensitive,
            },
            rest,
        ))
    }

    fn entry(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        self.table.get(index).ok_or(HpackError::InvalidIndex)
    }

    /// String literal (§5.2). The declared length is checked against the
    /// input and the list limit before anything is allocated.
    fn string<'a>(&self, src: &'a [u8]) -> Result<(Vec<u8>, &'a [u8]), HpackError> {
        let huffman = src.first().is_some_and(|&b| b & 0x80 != 0);
        let (len, n) = integer::decode(src, 7)?;
        if len > self.max_list_size.saturating_sub(entry_size(b"", b"")) {
            return Err(HpackError::StringTooLong);
        }
        let rest = &src[n..];
        if len > rest.len() {
            return Err(HpackError::Truncated);
        }
        let (raw, rest) = rest.split_at(len);
        if !huffman {
            return Ok((raw.to_vec(), rest));
        }
        let mut decoded = Vec::with_capacity(len + len / 2);
        huffman::decode(raw, &mut decoded)?;
        Ok((decoded, rest))
    }
}

#[cfg(test)]
impl Decoder {
    /// The dynamic table, for tests to inspect.
    pub fn table(&self) -> &Table {
        &self.table
    }
}
