//! The static table (Appendix A) and the dynamic table (§2.3, §4).

use std::collections::VecDeque;

/// Entry size: name and value octets plus 32 for bookkeeping (§4.1). Also
/// the header list size unit of RFC 9113 SETTINGS_MAX_HEADER_LIST_SIZE.
pub fn entry_size(name: &[u8], value: &[u8]) -> usize {
    name.len() + value.len() + 32
}

/// Appendix A; index 1 is the first element.
#[rustfmt::skip]
const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""), (b":method", b"GET"), (b":method", b"POST"), // 1
    (b":path", b"/"), (b":path", b"/index.html"), (b":scheme", b"http"), // 4
    (b":scheme", b"https"), (b":status", b"200"), (b":status", b"204"), // 7
    (b":status", b"206"), (b":status", b"304"), (b":status", b"400"), // 10
    (b":status", b"404"), (b":status", b"500"), (b"accept-charset", b""), // 13
    (b"accept-encoding", b"gzip, deflate"), (b"accept-language", b""), // 16
    (b"accept-ranges", b""), (b"accept", b""), (b"access-control-allow-origin", b""), // 18
    (b"age", b""), (b"allow", b""), (b"authorization", b""), (b"cache-control", b""), // 21
    (b"content-disposition", b""), (b"content-encoding", b""), // 25
    (b"content-language", b""), (b"content-length", b""), // 27
    (b"content-location", b""), (b"content-range", b""), (b"content-type", b""), // 29
    (b"cookie", b""), (b"date", b""), (b"etag", b""), (b"expect", b""), // 32
    (b"expires", b""), (b"from", b""), (b"host", b""), (b"if-match", b""), // 36
    (b"if-modified-since", b""), (b"if-none-match", b""), (b"if-range", b""), // 40
    (b"if-unmodified-since", b""), (b"last-modified", b""), (b"link", b""), // 43
    (b"location", b""), (b"max-forwards", b""), (b"proxy-authenticate", b""), // 46
    (b"proxy-authorization", b""), (b"range", b""), (b"referer", b""), // 49
    (b"refresh", b""), (b"retry-after", b""), (b"server", b""), (b"set-cookie", b""), // 52
    (b"strict-transport-security", b""), (b"transfer-encoding", b""), // 56
    (b"user-agent", b""), (b"vary", b""), (b"via", b""), (b"www-authenticate", b""), // 58
];

/// The index space of one direction of a connection: the static table
/// followed by a FIFO dynamic table whose newest entry comes first (§2.3.3).
#[derive(Clone, Debug)]
pub struct Table {
    dynamic: VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max_size: usize,
}

impl Table {
    pub fn new(max_size: usize) -> Self {
        Self {
            dynamic: VecDeque::new(),
            size: 0,
            max_size,
        }
    }

    pub fn max_size(&self) -> usize {
        self.max_size
    }

    /// Entry at a 1-based index: 1..=61 static, then dynamic (§2.3.3).
    pub fn get(&self, index: usize) -> Option<(&[u8], &[u8])> {
        match index.checked_sub(1)? {
            i if i < STATIC.len() => Some(STATIC[i]),
            i => self
                .dynamic
                .get(i - STATIC.len())
                .map(|(n, v)| (&n[..], &v[..])),
        }
    }

    /// The lowest index holding `name: value`, `(index, true)`, else the
    /// lowest holding `name`, `(index, false)`. A linear scan: the table
    /// holds at most max_size / 32 entries.
    pub fn find(&self, name: &[u8], value: &[u8]) -> Option<(usize, bool)> {
        let dynamic = self.dynamic.iter().map(|(n, v)| (&n[..], &v[..]));
        let mut name_match = None;
        for (i, (n, v)) in STATIC.iter().copied().chain(dynamic).enumerate() {
            if n == name {
                if v == value {
                    return Some((i + 1, true));
                }
                name_match.get_or_insert((i + 1, false));
            }
        }
        name_match
    }

    /// Adds an entry, evicting the oldest ones to make room; an entry larger
    /// than the maximum size empties the table and is not added (§4.4).
    pub fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = entry_size(&name, &value);
        if size > self.max_size {
            self.evict_to(0);
            return;
        }
        self.evict_to(self.max_size - size);
        self.size += size;
        self.dynamic.push_front((name, value));
    }

    /// Applies a new maximum size, evicting until the table fits (§4.3).
    pub fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    fn evict_to(&mut self, target: usize) {
        while self.size > target {
            let Some((name, value)) = self.dynamic.pop_back() else {
                break;
            };
            self.size -= entry_size(&name, &value);
        }
    }
}

#[cfg(test)]
impl Table {
    pub fn size(&self) -> usize {
        self.size
    }

    /// Dynamic entries, newest first, as text for assertions.
    pub fn entries(&self) -> Vec<(String, String)> {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        self.dynamic
            .iter()
            .map(|(n, v)| (text(n), text(v)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(table: &mut Table, name: &str, value: &str) {
        table.insert(name.into(), value.into());
    }

    fn strs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|&(n, v)| (n.into(), v.into())).collect()
    }

    #[test]
    fn static_table_matches_appendix_a_and_index_zero_is_invalid() {
        let table = Table::new(4096);
        assert_eq!(table.get(0), None);
        assert_eq!(table.get(1), Some((&b":authority"[..], &b""[..])));
        assert_eq!(table.get(2), Some((&b":method"[..], &b"GET"[..])));
        assert_eq!(
            table.get(16),
            Some((&b"accept-encoding"[..], &b"gzip, deflate"[..]))
        );
        assert_eq!(table.get(61), Some((&b"www-authenticate"[..], &b""[..])));
        assert_eq!(table.get(62), None);
    }

    #[test]
    fn dynamic_entries_are_newest_first_and_sized_with_32_overhead() {
        let mut table = Table::new(4096);
        add(&mut table, "a", "1");
        add(&mut table, "b", "22");
        assert_eq!(table.get(62), Some((&b"b"[..], &b"22"[..])));
        assert_eq!(table.get(63), Some((&b"a"[..], &b"1"[..])));
        assert_eq!(table.get(64), None);
        assert_eq!(table.size(), 34 + 35);
    }

    #[test]
    fn insert_evicts_oldest_first() {
        let mut table = Table::new(3 * 34);
        for name in ["a", "b", "c", "d"] {
            add(&mut table, name, "1");
        }
        assert_eq!(table.entries(), strs(&[("d", "1"), ("c", "1"), ("b", "1")]));
        assert_eq!(table.size(), 3 * 34);
    }

    #[test]
    fn shrinking_max_size_evicts_and_zero_empties() {
        let mut table = Table::new(4096);
        for name in ["a", "b", "c"] {
            add(&mut table, name, "1");
        }
        table.set_max_size(70);
        assert_eq!(table.entries(), strs(&[("c", "1"), ("b", "1")]));
        table.set_max_size(0);
        assert_eq!((table.entries().len(), table.size()), (0, 0));
    }

    #[test]
    fn oversized_entry_empties_the_table() {
        let mut table = Table::new(100);
        add(&mut table, "a", "1");
        table.insert(vec![b'x'; 40], vec![b'y'; 40]);
        assert_eq!((table.entries().len(), table.size()), (0, 0));
    }

    #[test]
    fn find_prefers_exact_match_then_lowest_name_index() {
        let mut table = Table::new(4096);
        add(&mut table, ":method", "PUT");
        assert_eq!(table.find(b":method", b"POST"), Some((3, true)));
        assert_eq!(table.find(b":method", b"PUT"), Some((62, true)));
        assert_eq!(table.find(b":method", b"DELETE"), Some((2, false)));
        assert_eq!(table.find(b"x-custom", b""), None);
    }
}
