//! Streamed answers: a head now, its content as it comes, and the answers held behind it.

use super::super::response::{self, Answer, Delimiting};
use super::{Http1Connection, OpenStream};

/// Streamed answers (Server-Sent Events, WHATWG HTML §9.2), delimited by chunked coding
/// (RFC 9112 §7.1) for HTTP/1.1 clients and by the close for HTTP/1.0 ones (§6.3 item 8).
impl Http1Connection {
    /// Answers the oldest owed request (as [`respond_with`](Self::respond_with) would) with a
    /// head whose content follows in [`stream_data`](Self::stream_data) until
    /// [`end_stream`](Self::end_stream). False if no request is owed or a stream is already
    /// open. For HEAD (and 204, 304) only the head is sent; the stream is still open until
    /// ended, so end it at once. To an HTTP/1.0 client the content is unframed and the
    /// connection closes when the stream ends: requests parsed after it are dropped.
    pub fn start_stream(
        &mut self,
        status: u16,
        fields: &[(&str, &str)],
        content_type: &str,
    ) -> bool {
        if self.stream.is_some() {
            return false;
        }
        let Some(owed) = self.next_owed() else {
            return false;
        };
        // What a GET would get, announced to HEAD too (RFC 9110 §9.3.2, RFC 9112 §6.1).
        let announced = match (matches!(status, 204 | 304), owed.http10) {
            (true, _) => Delimiting::Nothing,
            (false, true) => Delimiting::Close,
            (false, false) => Delimiting::Chunked,
        };
        let delimiting = if owed.head_only {
            Delimiting::Nothing
        } else {
            announced
        };
        if delimiting == Delimiting::Close {
            // Nothing can follow an answer that the close delimits.
            self.stop();
            self.ready.clear();
            self.owed.clear();
            self.refusal = None;
        }
        let mut framing = self.framing_for(owed);
        framing.close |= delimiting == Delimiting::Close;
        framing.confirm_keep_alive &= !framing.close;
        let answer = Answer {
            status,
            fields,
            content_type,
            body: b"",
        };
        response::encode_stream_head(&mut self.output, &answer, announced, framing);
        self.stream = Some(OpenStream {
            delimiting,
            gone: self.input_ended,
        });
        self.last_activity = self.now;
        true
    }

    /// Appends `data` to the open stream (one chunk; an empty slice writes nothing and does
    /// not end it). False, and nothing written, when no stream is open, its client is gone,
    /// or the unwritten output already fills [`Config::max_pending_output`](crate::http1::Config::max_pending_output): a client that
    /// does not read loses data rather than growing our memory.
    pub fn stream_data(&mut self, data: &[u8]) -> bool {
        let Some(stream) = self.stream else {
            return false;
        };
        if stream.gone || self.pending_output().len() >= self.config.max_pending_output {
            return false;
        }
        match stream.delimiting {
            Delimiting::Chunked => response::chunk(&mut self.output, data),
            Delimiting::Close => self.output.extend_from_slice(data),
            Delimiting::Nothing => {}
        }
        self.last_activity = self.now;
        true
    }

    /// Ends the open stream (the last chunk, for a chunked one); the answers held behind it
    /// follow, then parsing resumes. False if no stream is open.
    pub fn end_stream(&mut self) -> bool {
        let Some(stream) = self.stream.take() else {
            return false;
        };
        if stream.delimiting == Delimiting::Chunked {
            self.output.extend_from_slice(response::LAST_CHUNK);
        }
        self.output.append(&mut self.held);
        self.last_activity = self.now;
        self.after_answer();
        true
    }

    /// Whether the open stream's client went away: it closed its side, or sent something
    /// the connection refused (then the connection ends after the stream). The application
    /// should deregister and [`end_stream`](Self::end_stream).
    pub fn stream_gone(&self) -> bool {
        self.stream.is_some_and(|s| s.gone)
    }
}
