//! A tiny blocking HTTP/1.1 client for the metrics endpoint tests: raw bytes out, framed
//! answers in.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One answer off the wire.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub fields: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn field(&self, name: &str) -> Option<&str> {
        let found = self
            .fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name));
        found.map(|(_, v)| v.as_str())
    }
}

/// A connection with a read timeout, so a hung server fails the test instead of hanging it.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads `n` answers; `head_only[i]` marks answers to HEAD, which carry no body.
pub fn read_answers(stream: &mut TcpStream, head_only: &[bool]) -> Vec<Answer> {
    let mut buf = Vec::new();
    let mut answers = Vec::new();
    for &head in head_only {
        loop {
            if let Some((answer, used)) = parse_answer(&buf, head) {
                buf.drain(..used);
                answers.push(answer);
                break;
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).expect("read an answer");
            assert!(
                n > 0,
                "closed after {} answers: {:?}",
                answers.len(),
                String::from_utf8_lossy(&buf)
            );
            buf.extend_from_slice(&chunk[..n]);
        }
    }
    answers
}

fn parse_answer(buf: &[u8], head_only: bool) -> Option<(Answer, usize)> {
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut fields);
    let httparse::Status::Complete(len) = resp.parse(buf).expect("a well-formed answer") else {
        return None;
    };
    let fields: Vec<(String, String)> = resp
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let length = fields
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse::<usize>().expect("numeric Content-Length"))
        .expect("Content-Length");
    let body_len = if head_only { 0 } else { length };
    let body = buf.get(len..len + body_len)?;
    let answer = Answer {
        status: resp.code.unwrap(),
        body: String::from_utf8(body.to_vec()).expect("UTF-8 body"),
        fields,
    };
    Some((answer, len + body_len))
}

/// Sends `raw` on a fresh connection and reads one answer.
pub fn exchange(addr: SocketAddr, raw: &[u8]) -> Answer {
    let mut s = connect(addr);
    s.write_all(raw).unwrap();
    read_answers(&mut s, &[false]).remove(0)
}

/// `GET path` on a fresh connection.
pub fn get(addr: SocketAddr, path: &str) -> Answer {
    exchange(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes(),
    )
}

/// Whether the server closed the connection (reads EOF within the timeout).
pub fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).is_ok()
}
