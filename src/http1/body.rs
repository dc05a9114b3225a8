//! Reading a request body as it arrives (RFC 9112 §6): a known length, or chunked (§7.1).
//!
//! The reader is a state machine that keeps its place between pieces of input, so each byte is
//! looked at once whatever the pieces are: a body dribbled a byte at a time costs no re-scan.
//! Chunk data is copied a slice at a time; only the framing (sizes, extensions, trailers) is
//! read byte by byte.

use super::head::BodyLength;

/// A chunk-size line (size and extensions) longer than this is 400: extensions are ignored,
/// and no client needs this many bytes to say how long a chunk is.
const MAX_CHUNK_LINE: usize = 4096;

/// The limits the reader enforces, from the connection's [`super::Config`].
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// Longest body; a chunk that would pass it is 413 before its data is read.
    pub max_body: usize,
    /// What this body may take of the bytes the server lets all bodies in flight hold (the
    /// driver's budget); a chunk that would pass it is 503 before its data is read. Checked
    /// after `max_body`: a body no budget could take is 413, not "try again".
    pub allowance: usize,
    /// Longest trailer section (read and dropped, RFC 9112 §7.1.2); longer is 431.
    pub max_trailers: usize,
}

/// Where a body being read is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BodyReader {
    /// `Content-Length`: this many bytes still to come.
    Length(u64),
    /// `Transfer-Encoding: chunked`, at this point of its grammar.
    Chunked(Chunked),
}

/// The chunked grammar (RFC 9112 §7.1), one state per place a byte can land. Lines end with
/// CRLF: a bare LF in the framing is 400, so that no two parsers can split a body differently
/// (request smuggling).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Chunked {
    /// `chunk-size = 1*HEXDIG`: the value so far, and how many bytes the line has.
    Size { size: u64, line: usize },
    /// A chunk extension after the size, ignored up to the CR (RFC 9112 §7.1.1).
    Extension { size: u64, line: usize },
    /// The CR of the size line came; its LF is due.
    SizeLf { size: u64 },
    /// `chunk-data`: this many bytes still to come.
    Data { remaining: u64 },
    /// The CR after chunk data is due.
    DataCr,
    /// The LF after chunk data is due.
    DataLf,
    /// In the trailer section, `total` bytes so far, `line` of them on the current line.
    Trailer { line: usize, total: usize },
    /// A trailer line's CR came (`line` bytes before it; 0 ends the section); its LF is due.
    TrailerLf { line: usize, total: usize },
}

/// What one [`BodyReader::read`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Progress {
    /// Bytes of the input that belong to the body (its framing included).
    pub used: usize,
    /// The body is complete; the input after `used` is the next request.
    pub done: bool,
}

impl BodyReader {
    /// The reader for a framing, or `None` when there is no body to read.
    pub fn new(length: BodyLength) -> Option<Self> {
        match length {
            BodyLength::None => None,
            BodyLength::Exactly(n) => Some(BodyReader::Length(n)),
            BodyLength::Chunked => Some(BodyReader::Chunked(Chunked::Size { size: 0, line: 0 })),
        }
    }

    /// Moves what `input` holds of the body into `body`; an error is the status refusing it.
    pub fn read(
        &mut self,
        input: &[u8],
        body: &mut Vec<u8>,
        limits: Limits,
    ) -> Result<Progress, u16> {
        match self {
            BodyReader::Length(remaining) => {
                let used = take(input, remaining, body);
                Ok(Progress {
                    used,
                    done: *remaining == 0,
                })
            }
            BodyReader::Chunked(state) => read_chunked(state, input, body, limits),
        }
    }
}

/// Copies up to `remaining` bytes of `input` to `body`; returns how many.
fn take(input: &[u8], remaining: &mut u64, body: &mut Vec<u8>) -> usize {
    let n = usize::try_from(*remaining).map_or(input.len(), |r| r.min(input.len()));
    body.extend_from_slice(&input[..n]);
    *remaining -= n as u64;
    n
}

/// Runs the chunked grammar over `input`; stops at the end of the body or of the input.
fn read_chunked(
    state: &mut Chunked,
    input: &[u8],
    body: &mut Vec<u8>,
    limits: Limits,
) -> Result<Progress, u16> {
    let mut used = 0;
    while used < input.len() {
        if let Chunked::Data { remaining } = state {
            used += take(&input[used..], remaining, body);
            if *remaining == 0 {
                *state = Chunked::DataCr;
            }
            continue;
        }
        let byte = input[used];
        used += 1;
        match step(*state, byte, body.len(), limits)? {
            Some(next) => *state = next,
            None => return Ok(Progress { used, done: true }),
        }
    }
    Ok(Progress { used, done: false })
}

/// One framing byte; `None` when it was the last byte of the body.
fn step(state: Chunked, byte: u8, body_len: usize, limits: Limits) -> Result<Option<Chunked>, u16> {
    let next = match (state, byte) {
        (Chunked::Size { size, line }, _) if byte.is_ascii_hexdigit() && line < MAX_CHUNK_LINE => {
            Chunked::Size {
                size: hex_digit(size, byte).ok_or(400u16)?,
                line: line + 1,
            }
        }
        (Chunked::Size { line: 0, .. }, _) => return Err(400),
        (Chunked::Size { size, .. }, b'\r') => Chunked::SizeLf { size },
        (Chunked::Size { size, line }, b';' | b' ' | b'\t') => Chunked::Extension { size, line },
        (Chunked::Extension { size, .. }, b'\r') => Chunked::SizeLf { size },
        (Chunked::Extension { size, line }, _) if is_text(byte) && line < MAX_CHUNK_LINE => {
            Chunked::Extension {
                size,
                line: line + 1,
            }
        }
        (Chunked::SizeLf { size: 0 }, b'\n') => Chunked::Trailer { line: 0, total: 0 },
        (Chunked::SizeLf { size }, b'\n') => Chunked::Data {
            remaining: admit(size, body_len, limits)?,
        },
        (Chunked::DataCr, b'\r') => Chunked::DataLf,
        (Chunked::DataLf, b'\n') => Chunked::Size { size: 0, line: 0 },
        (Chunked::Trailer { line, total }, b'\r') => Chunked::TrailerLf { line, total },
        (Chunked::Trailer { line, total }, _) if is_text(byte) => {
            if total >= limits.max_trailers {
                return Err(431);
            }
            Chunked::Trailer {
                line: line + 1,
                total: total + 1,
            }
        }
        (Chunked::TrailerLf { line: 0, .. }, b'\n') => return Ok(None),
        (Chunked::TrailerLf { total, .. }, b'\n') => Chunked::Trailer { line: 0, total },
        _ => return Err(400),
    };
    Ok(Some(next))
}

/// A chunk of `size` bytes after `body_len` of them: 413 past the body limit, 503 past the
/// allowance (RFC 9110 §15.5.14, §15.6.4).
fn admit(size: u64, body_len: usize, limits: Limits) -> Result<u64, u16> {
    let fits =
        |limit: usize| usize::try_from(size).is_ok_and(|s| s <= limit.saturating_sub(body_len));
    match (fits(limits.max_body), fits(limits.allowance)) {
        (false, _) => Err(413),
        (true, false) => Err(503),
        (true, true) => Ok(size),
    }
}

/// `size * 16 + digit`, or `None` on overflow (a size no body limit could allow anyway).
fn hex_digit(size: u64, byte: u8) -> Option<u64> {
    let digit = char::from(byte).to_digit(16)?;
    size.checked_mul(16)?.checked_add(u64::from(digit))
}

/// A byte a field value or chunk extension may hold: visible, space, tab or obs-text (RFC 9110
/// §5.5); no other control character, so no CR or LF.
fn is_text(byte: u8) -> bool {
    byte == b'\t' || (byte >= b' ' && byte != 0x7f)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_body: 64,
        allowance: usize::MAX,
        max_trailers: 32,
    };

    fn chunked() -> BodyReader {
        BodyReader::new(BodyLength::Chunked).unwrap()
    }

    /// Reads `input` whole; the body, and how many bytes were used.
    fn read_all(input: &[u8]) -> Result<(Vec<u8>, Progress), u16> {
        let mut body = Vec::new();
        let progress = chunked().read(input, &mut body, LIMITS)?;
        Ok((body, progress))
    }

    #[test]
    fn a_chunked_body_ends_at_its_last_chunk_and_trailers() {
        let input = b"5\r\nhello\r\n1;ext=\"x\"\r\n!\r\n0\r\nX-T: 1\r\n\r\nGET";
        let (body, progress) = read_all(input).unwrap();
        assert_eq!(body, b"hello!");
        assert_eq!(progress.used, input.len() - 3);
        assert!(progress.done);
    }

    #[test]
    fn a_chunked_body_split_at_every_byte_is_reassembled() {
        let input = b"A\r\n0123456789\r\n2 ; a=b\r\nxy\r\n000\r\n\r\n";
        let mut reader = chunked();
        let mut body = Vec::new();
        for (i, b) in input.iter().enumerate() {
            let progress = reader
                .read(std::slice::from_ref(b), &mut body, LIMITS)
                .unwrap();
            assert_eq!((progress.used, progress.done), (1, i == input.len() - 1));
        }
        assert_eq!(body, b"0123456789xy");
    }

    #[test]
    fn bad_chunk_framing_is_400() {
        for bad in [
            &b"\r\n"[..],
            b"g\r\n",
            b"5\nhello\r\n",
            b"5\r\nhelloX",
            b"5\r\nhello\r\r",
            b"0\r\nX: a\nb\r\n",
            b"ffffffffffffffffff\r\n",
            b"1;\x01\r\n",
        ] {
            assert_eq!(read_all(bad), Err(400), "{bad:?}");
        }
    }

    #[test]
    fn a_chunk_past_the_limit_is_413_before_its_data() {
        assert_eq!(
            read_all(b"20\r\n"),
            Ok((
                vec![],
                Progress {
                    used: 4,
                    done: false
                }
            ))
        );
        assert_eq!(read_all(b"41\r\n"), Err(413));
        let two = [&b"40\r\n"[..], &[b'a'; 64], b"\r\n1\r\n"].concat();
        assert_eq!(read_all(&two), Err(413));
    }

    #[test]
    fn a_chunk_past_the_allowance_is_503_and_past_the_limit_413() {
        let tight = Limits {
            allowance: 16,
            ..LIMITS
        };
        let mut body = Vec::new();
        let read = |input: &[u8], body: &mut Vec<u8>| chunked().read(input, body, tight);
        assert_eq!(read(b"10\r\n", &mut body).map(|p| p.done), Ok(false));
        assert_eq!(read(b"11\r\n", &mut body), Err(503));
        assert_eq!(
            read(b"41\r\n", &mut body),
            Err(413),
            "no budget could take it"
        );
        let two = [&b"8\r\n"[..], &[b'a'; 8], b"\r\n9\r\n"].concat();
        assert_eq!(
            read(&two, &mut body),
            Err(503),
            "counted over the whole body"
        );
    }

    #[test]
    fn long_extensions_and_trailers_are_bounded() {
        let ext = [&b"1;"[..], &[b'e'; MAX_CHUNK_LINE + 1]].concat();
        assert_eq!(read_all(&ext), Err(400));
        let trailer = [&b"0\r\nX: "[..], &[b't'; 40]].concat();
        assert_eq!(read_all(&trailer), Err(431));
    }

    #[test]
    fn a_length_body_takes_exactly_its_bytes() {
        let mut reader = BodyReader::new(BodyLength::Exactly(3)).unwrap();
        let mut body = Vec::new();
        let p = reader.read(b"ab", &mut body, LIMITS).unwrap();
        assert_eq!((p.used, p.done), (2, false));
        let p = reader.read(b"cGET", &mut body, LIMITS).unwrap();
        assert_eq!((p.used, p.done, body.as_slice()), (1, true, &b"abc"[..]));
    }
}
