//! Header block encoding (RFC 7541 §3, §6).

use super::table::{entry_size, Table};
use super::{huffman, integer, Field};

/// The SETTINGS_HEADER_TABLE_SIZE every peer starts with (RFC 9113 §6.5.2).
const DEFAULT_TABLE_SIZE: usize = 4096;

/// Encodes the header blocks we send on one connection, in order.
///
/// Policy: an exact table match is sent indexed (§6.1); anything else is a
/// literal with incremental indexing (§6.2.1), reusing a table name when one
/// matches, so repeated pairs cost one octet from their second use. Entries
/// too large for the table are sent without indexing (§6.2.2) rather than
/// flushing it. Strings are Huffman-coded unless that is longer (§5.2).
#[derive(Debug)]
pub struct Encoder {
    table: Table,
    /// Smallest and latest table size set since the last block (§4.2).
    pending_update: Option<(usize, usize)>,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    /// An encoder with the initial 4096-octet dynamic table (RFC 9113 §6.5.2).
    pub fn new() -> Self {
        Self {
            table: Table::new(DEFAULT_TABLE_SIZE),
            pending_update: None,
        }
    }

    /// Adopts a new table size when the peer's SETTINGS_HEADER_TABLE_SIZE
    /// changes. The next block opens with the smallest size set since the
    /// previous block and then the latest, so the peer evicts exactly as we
    /// do (§4.2, §6.3). The table grows to whatever is passed here, so clamp
    /// an untrusted peer value to a budget of ours first.
    pub fn set_max_table_size(&mut self, size: usize) {
        let min = self.pending_update.map_or(size, |(min, _)| min.min(size));
        self.pending_update = Some((min, size));
    }

    /// Appends one complete header block for `headers`, in order, to `dst`.
    pub fn encode<'a>(&mut self, headers: impl IntoIterator<Item = Field<'a>>, dst: &mut Vec<u8>) {
        if let Some((min, last)) = self.pending_update.take() {
            if min < last {
                self.size_update(min, dst);
            }
            self.size_update(last, dst);
        }
        for (name, value) in headers {
            self.field(name, value, dst);
        }
    }

    /// Dynamic table size update (§6.3).
    fn size_update(&mut self, size: usize, dst: &mut Vec<u8>) {
        integer::encode(size, 5, 0x20, dst);
        self.table.set_max_size(size);
    }

    fn field(&mut self, name: &[u8], value: &[u8], dst: &mut Vec<u8>) {
        let name_index = match self.table.find(name, value) {
            Some((index, true)) => return integer::encode(index, 7, 0x80, dst),
            Some((index, false)) => index,
            None => 0,
        };
        let indexing = entry_size(name, value) <= self.table.max_size();
        if indexing {
            integer::encode(name_index, 6, 0x40, dst);
        } else {
            integer::encode(name_index, 4, 0x00, dst);
        }
        if name_index == 0 {
            write_string(name, dst);
        }
        write_string(value, dst);
        if indexing {
            self.table.insert(name.to_vec(), value.to_vec());
        }
    }
}

/// String literal (§5.2), Huffman-coded unless that is longer (ties go to
/// Huffman, as in the Appendix C examples).
fn write_string(s: &[u8], dst: &mut Vec<u8>) {
    let huffman_len = huffman::encoded_len(s);
    if !s.is_empty() && huffman_len <= s.len() {
        integer::encode(huffman_len, 7, 0x80, dst);
        huffman::encode(s, dst);
    } else {
        integer::encode(s.len(), 7, 0x00, dst);
        dst.extend_from_slice(s);
    }
}

#[cfg(test)]
impl Encoder {
    /// The dynamic table, for tests to inspect.
    pub fn table(&self) -> &Table {
        &self.table
    }
}
