//! An HTTP exchange of bytes as they are: what no HTTP client library sends (a malformed
//! request line, a head too large, an unknown transfer coding).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The answer to a raw request, read to the close.
pub struct RawAnswer {
    pub status: u16,
    /// The status line and the headers.
    pub head: String,
    pub body: String,
}

impl RawAnswer {
    /// The value of header `name` (any case), if the answer has one.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, value) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }
}

/// Sends `request` on a connection of its own and reads the answer to its end (within
/// 10 s).
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> RawAnswer {
    let stream = TcpStream::connect(addr).await.expect("connects");
    let (mut reader, mut writer) = stream.into_split();
    // A server may answer a head too large before it has read all of it, and close: the
    // answer is read while the rest is still sent (a failed write is fine), so that it is
    // read before the reset that the unread rest draws.
    let request = request.to_vec();
    let writing = tokio::spawn(async move {
        let _ = writer.write_all(&request).await;
        writer
    });
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), reader.read_to_end(&mut answer));
    let _ = read.await.expect("the answer ends in time");
    drop(writing.await);
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    RawAnswer {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}
