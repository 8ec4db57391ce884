//! hyper answers a request it cannot read itself, before any service sees it: a malformed
//! request line or header 400, a head over its buffer or over 100 headers 431, a URI over
//! 64 KiB 414, each with `content-length: 0`. hyper has no hook for that answer, so
//! [`WithErrorBodies`] watches a connection's writes for it and gives it the house JSON
//! error body ([`RouteError`]) instead. Any other write passes untouched, after a look at
//! its first bytes.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::RouteError;

/// A connection whose hyper-made error answers get the house error body.
pub struct WithErrorBodies<IO> {
    io: IO,
    /// An answer rewritten, still to be written, and how much of it was.
    pending: Vec<u8>,
    written: usize,
}

impl<IO> WithErrorBodies<IO> {
    pub fn new(io: IO) -> Self {
        Self {
            io,
            pending: Vec::new(),
            written: 0,
        }
    }
}

impl<IO: AsyncWrite + Unpin> WithErrorBodies<IO> {
    /// Writes what is left of a rewritten answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending = Vec::new();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Takes `buf` as written when it is one of hyper's own error answers, whose rewritten
    /// form is then written (as far as it goes now) in its place.
    fn poll_rewritten(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Option<Poll<io::Result<usize>>> {
        let answer = with_error_body(buf)?;
        self.pending = answer;
        Some(match self.poll_pending(cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            // The rest is written by the next write, flush or shutdown.
            _ => Poll::Ready(Ok(buf.len())),
        })
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for WithErrorBodies<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for WithErrorBodies<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if let Some(written) = self.poll_rewritten(cx, buf) {
            return written;
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        // hyper's error answer is a head alone: one buffer.
        let mut filled = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (filled.next(), filled.next())
            && let Some(written) = self.poll_rewritten(cx, only)
        {
            return written;
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// hyper's own answer to a request it could not read (`written` is a whole head of status
/// 400, 414 or 431 declaring an empty body, and nothing else), with the house error body;
/// `None` for anything else. The services' own answers never match: their errors have
/// bodies.
fn with_error_body(written: &[u8]) -> Option<Vec<u8>> {
    let status = written
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| written.strip_prefix(b"HTTP/1.0 "))?;
    let error = match status.get(..4)? {
        b"400 " => RouteError::MalformedRequest,
        b"414 " => RouteError::UriTooLong,
        b"431 " => RouteError::HeadersTooLarge,
        _ => return None,
    };
    const EMPTY: &[u8] = b"\r\ncontent-length: 0\r\n";
    if find(written, b"\r\n\r\n")? + 4 != written.len() {
        return None;
    }
    let length = find(written, EMPTY)? + 2;
    let body = error.body().to_string();
    let mut answer = Vec::with_capacity(written.len() + body.len() + 40);
    answer.extend_from_slice(&written[..length]);
    answer.extend_from_slice(b"content-type: application/json\r\n");
    answer.extend_from_slice(format!("content-length: {}", body.len()).as_bytes());
    answer.extend_from_slice(&written[length + EMPTY.len() - 4..]);
    answer.extend_from_slice(body.as_bytes());
    Some(answer)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    const HEAD_431: &[u8] =
        b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Thu, 26 Nov 2026 03:00:00 GMT\r\n\r\n";

    fn split(answer: &[u8]) -> (String, serde_json::Value) {
        let end = find(answer, b"\r\n\r\n").expect("a head") + 4;
        let head = String::from_utf8(answer[..end].to_vec()).expect("text");
        let body = serde_json::from_slice(&answer[end..]).expect("a JSON body");
        (head, body)
    }

    #[test]
    fn hypers_error_answers_get_the_house_body() {
        let answer = with_error_body(HEAD_431).expect("rewritten");
        let (head, body) = split(&answer);
        let length = body.to_string().len();
        assert_eq!(
            head,
            format!(
                "HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n\
                 content-length: {length}\r\ndate: Thu, 26 Nov 2026 03:00:00 GMT\r\n\r\n"
            )
        );
        assert_eq!(body["error"]["code"], "request_headers_too_large");
        for (head, code) in [
            (
                &b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n"[..],
                "malformed_request",
            ),
            (
                b"HTTP/1.0 414 URI Too Long\r\ncontent-length: 0\r\n\r\n",
                "uri_too_long",
            ),
        ] {
            let (_, body) = split(&with_error_body(head).expect("rewritten"));
            assert_eq!(body["error"]["code"], code);
            assert!(
                body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.ends_with('.'))
            );
        }
    }

    #[test]
    fn every_other_write_passes() {
        for written in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            // An answer with a body of its own, head and body in one write.
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 20\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
            b"{\"error\":{}}",
            b"HTTP/1.1 4",
            b"",
        ] {
            assert_eq!(with_error_body(written), None, "{}", String::from_utf8_lossy(written));
        }
    }

    /// A writer that takes at most 7 bytes a call.
    struct Narrow(Vec<u8>);

    impl AsyncWrite for Narrow {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = buf.len().min(7);
            self.0.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_rewritten_answer_is_written_whole_however_the_socket_takes_it() {
        let mut connection = WithErrorBodies::new(Narrow(Vec::new()));
        connection.write_all(HEAD_431).await.expect("written");
        connection.flush().await.expect("flushed");
        let (_, body) = split(&connection.io.0);
        assert_eq!(body["error"]["code"], "request_headers_too_large");

        let mut connection = WithErrorBodies::new(Narrow(Vec::new()));
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        connection.write_all(ok).await.expect("written");
        assert_eq!(connection.io.0, ok);
    }
}
