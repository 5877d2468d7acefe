//! A real SMTP server on 127.0.0.1 for tests (feature `smtp`): it accepts every message, keeps
//! it in memory, and lets the test read what arrived, wait for it, or refuse the next
//! transactions to exercise retries.
//!
//! It speaks the part of SMTP (RFC 5321) a client such as `lettre` uses: the greeting, `EHLO`
//! (advertising `8BITMIME`, `SMTPUTF8` and `AUTH PLAIN LOGIN`, and no `STARTTLS`, so plain
//! `smtp://` URLs work), `HELO`, `AUTH PLAIN` and `AUTH LOGIN` (any credentials are accepted and
//! the user name is recorded, so URLs with credentials can be tested), `MAIL FROM`, `RCPT TO`,
//! `DATA` with dot-unstuffing, `RSET`, `NOOP` and `QUIT`; anything else is answered `502`.
//! Each connection is served by a task of its own, so clients may connect several at once.
//!
//! ```no_run
//! # async fn test() {
//! use std::time::Duration;
//! use kxp_testkit::smtp::SmtpSink;
//!
//! let sink = SmtpSink::start().await;
//! // … point the code under test at `sink.url()` and make it send one e-mail …
//! let mails = sink.wait_for(1, Duration::from_secs(5)).await;
//! assert_eq!(mails[0].subject().as_deref(), Some("Endpoint disabled"));
//! # }
//! ```

// A test fixture: a sink that cannot bind or read what it was sent fails the test that uses it.
#![expect(clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use base64::Engine;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};

/// The name the sink gives itself in its greeting and `EHLO` reply.
const NAME: &str = "kxp-testkit";

/// One message the sink accepted: the envelope and the message text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mail {
    /// The envelope sender (`MAIL FROM`), without the angle brackets; empty for `<>`.
    pub from: String,
    /// The envelope recipients (`RCPT TO`), without the angle brackets, in order.
    pub to: Vec<String>,
    /// The user name the client authenticated as on this connection, if it did.
    pub user: Option<String>,
    /// The message as received, dot-unstuffed, with its CRLF line endings: headers, blank line,
    /// body. The CRLF that belongs to the terminating `<CRLF>.<CRLF>` is not included, so this
    /// is byte for byte the message the client formatted.
    pub data: String,
}

impl Mail {
    /// The value of the first header called `name` (case-insensitive), unfolded and trimmed but
    /// otherwise raw: encoded words (RFC 2047) are left as they are.
    pub fn header(&self, name: &str) -> Option<String> {
        let (head, _) = split_message(&self.data);
        unfolded_headers(head)
            .into_iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, value)| value)
    }

    /// The `Subject`, with its encoded words (`=?utf-8?b?…?=`, `=?utf-8?q?…?=`) decoded, so a
    /// non-ASCII subject reads as it was written.
    pub fn subject(&self) -> Option<String> {
        self.header("Subject").map(|value| decode_words(&value))
    }

    /// The body as readable text: everything after the blank line, decoded according to the
    /// `Content-Transfer-Encoding` (`7bit`/`8bit`, `quoted-printable` with its soft line
    /// breaks, or `base64`) as UTF-8, with line endings turned back into `\n`.
    ///
    /// Clients such as `lettre` pick the encoding themselves (quoted-printable for mostly-ASCII
    /// text with a few non-ASCII characters, base64 for mostly non-ASCII text), so tests should
    /// compare this, not [`data`](Mail::data).
    pub fn body(&self) -> String {
        let (_, body) = split_message(&self.data);
        let encoding = self
            .header("Content-Transfer-Encoding")
            .unwrap_or_default()
            .to_ascii_lowercase();
        let bytes = match encoding.as_str() {
            "quoted-printable" => decode_quoted_printable(body.as_bytes()),
            "base64" => {
                let compact: String = body.split_ascii_whitespace().collect();
                base64::engine::general_purpose::STANDARD
                    .decode(compact)
                    .expect("SMTP sink: the body is not valid base64")
            }
            _ => body.as_bytes().to_vec(),
        };
        String::from_utf8_lossy(&bytes).replace("\r\n", "\n")
    }
}

/// An SMTP server on `127.0.0.1` and a free port, recording every message it accepts.
///
/// It stops (and drops every open connection) when the value is dropped.
#[derive(Debug)]
pub struct SmtpSink {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Woken whenever a message is accepted, for [`SmtpSink::wait_for`].
    arrived: Notify,
}

#[derive(Debug, Default)]
struct State {
    messages: Vec<Mail>,
    /// How many of the next transactions are answered 451 at `MAIL FROM`.
    refuse: usize,
}

impl Shared {
    /// The state; a test that panicked while holding the lock leaves nothing half-done in it,
    /// so a poisoned lock is still good to read.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SmtpSink {
    /// Starts the server on `127.0.0.1` and a port the system picks. Must be called inside a
    /// tokio runtime (as in `#[tokio::test]`); panics if no port can be bound.
    pub async fn start() -> SmtpSink {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("SMTP sink: cannot bind a port on 127.0.0.1");
        let addr = listener
            .local_addr()
            .expect("SMTP sink: the listener has no local address");
        let shared = Arc::new(Shared::default());
        let server = tokio::spawn(accept(listener, shared.clone()));
        SmtpSink {
            addr,
            shared,
            server,
        }
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to give an SMTP client: `smtp://127.0.0.1:PORT` (plain text, no TLS).
    pub fn url(&self) -> String {
        format!("smtp://{}", self.addr)
    }

    /// Every message accepted so far, in the order they were accepted.
    pub fn messages(&self) -> Vec<Mail> {
        self.shared.state().messages.clone()
    }

    /// Waits until at least `n` messages have been accepted and returns them all.
    ///
    /// Panics, saying how many did arrive, if that takes longer than `within`: a test waiting
    /// for mail that never comes must fail, not hang.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Mail> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Registered before looking, so a message accepted in between is not missed.
            let arrived = self.shared.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let messages = self.messages();
            if messages.len() >= n {
                return messages;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                let messages = self.messages();
                let subjects: Vec<String> = messages
                    .iter()
                    .map(|m| m.subject().unwrap_or_default())
                    .collect();
                panic!(
                    "SMTP sink: expected {n} message(s) within {within:?}, got {} (subjects: {subjects:?})",
                    messages.len()
                );
            }
        }
    }

    /// Makes the next `n` transactions fail: their `MAIL FROM` is answered
    /// `451 4.3.0 try again later`, a temporary failure a client should retry later. Replaces
    /// any count left from an earlier call; `0` accepts again at once.
    pub fn refuse_next(&self, n: usize) {
        self.shared.state().refuse = n;
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        // Aborting the accept loop drops its `JoinSet`, which aborts every connection.
        self.server.abort();
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve(stream, shared.clone()));
                }
                // Out of file descriptors, or a client that vanished before being accepted:
                // nothing to do but try again a moment later.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            // Reaps finished connections so the set does not grow without bound. A
            // connection's I/O error only means its client went away.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve(stream: TcpStream, shared: Arc<Shared>) -> std::io::Result<()> {
    let (read, write) = stream.into_split();
    Session {
        read: BufReader::new(read),
        write,
        shared,
        user: None,
        from: None,
        to: Vec::new(),
    }
    .run()
    .await
}

/// One client connection.
struct Session<R, W> {
    read: BufReader<R>,
    write: W,
    shared: Arc<Shared>,
    /// The user name of a successful `AUTH`.
    user: Option<String>,
    /// The transaction in progress: `MAIL FROM`, then the `RCPT TO`s.
    from: Option<String>,
    to: Vec<String>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Session<R, W> {
    async fn run(mut self) -> std::io::Result<()> {
        self.reply(&format!("220 {NAME} ESMTP sink ready")).await?;
        while let Some(line) = self.line().await? {
            let (verb, arg) = match line.split_once(' ') {
                Some((verb, arg)) => (verb, arg.trim()),
                None => (line.as_str(), ""),
            };
            match verb.to_ascii_uppercase().as_str() {
                "EHLO" => {
                    self.reset();
                    let reply = format!(
                        "250-{NAME} greets {arg}\r\n250-8BITMIME\r\n250-SMTPUTF8\r\n250 AUTH PLAIN LOGIN"
                    );
                    self.reply(&reply).await?;
                }
                "HELO" => {
                    self.reset();
                    self.reply(&format!("250 {NAME}")).await?;
                }
                "AUTH" => self.auth(arg).await?,
                "MAIL" => self.mail(arg).await?,
                "RCPT" => self.rcpt(arg).await?,
                "DATA" => {
                    if self.data().await?.is_none() {
                        return Ok(());
                    }
                }
                "RSET" => {
                    self.reset();
                    self.reply("250 2.0.0 OK").await?;
                }
                "NOOP" => self.reply("250 2.0.0 OK").await?,
                "QUIT" => {
                    self.reply("221 2.0.0 bye").await?;
                    return Ok(());
                }
                _ => self.reply("502 5.5.2 command not recognized").await?,
            }
        }
        Ok(())
    }

    /// Forgets the transaction in progress (not the authentication).
    fn reset(&mut self) {
        self.from = None;
        self.to.clear();
    }

    async fn auth(&mut self, arg: &str) -> std::io::Result<()> {
        if self.user.is_some() {
            return self.reply("503 5.5.1 already authenticated").await;
        }
        let (mechanism, initial) = match arg.split_once(' ') {
            Some((mechanism, initial)) => (mechanism, Some(initial.trim().to_owned())),
            None => (arg, None),
        };
        let user = match mechanism.to_ascii_uppercase().as_str() {
            "PLAIN" => {
                // authzid NUL authcid NUL password (RFC 4616); the user is the authcid.
                let Some(response) = self.challenge(initial, "").await? else {
                    return Ok(());
                };
                let parts: Vec<&[u8]> = response.split(|b| *b == 0).collect();
                match parts.as_slice() {
                    [_, user, _] => Some(String::from_utf8_lossy(user).into_owned()),
                    _ => None,
                }
            }
            "LOGIN" => {
                // The user name, then the password, each base64 after a base64 prompt.
                let Some(user) = self.challenge(initial, "VXNlcm5hbWU6").await? else {
                    return Ok(());
                };
                if self.challenge(None, "UGFzc3dvcmQ6").await?.is_none() {
                    return Ok(());
                }
                Some(String::from_utf8_lossy(&user).into_owned())
            }
            _ => return self.reply("504 5.5.4 mechanism not supported").await,
        };
        match user {
            Some(user) => {
                self.user = Some(user);
                self.reply("235 2.7.0 authentication successful").await
            }
            None => self.reply("501 5.5.2 malformed AUTH PLAIN response").await,
        }
    }

    /// The decoded answer to an `AUTH` prompt: `initial` if the client sent it with the
    /// command, else the next line after a `334 prompt`. `None` once the exchange has been
    /// answered with an error (cancelled with `*`, or not base64) or the client left.
    async fn challenge(
        &mut self,
        initial: Option<String>,
        prompt: &str,
    ) -> std::io::Result<Option<Vec<u8>>> {
        let line = match initial {
            Some(line) => line,
            None => {
                self.reply(&format!("334 {prompt}")).await?;
                match self.line().await? {
                    Some(line) => line,
                    None => return Ok(None),
                }
            }
        };
        if line.trim() == "*" {
            self.reply("501 5.7.0 authentication cancelled").await?;
            return Ok(None);
        }
        match base64::engine::general_purpose::STANDARD.decode(line.trim()) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(_) => {
                self.reply("501 5.5.2 not base64").await?;
                Ok(None)
            }
        }
    }

    async fn mail(&mut self, arg: &str) -> std::io::Result<()> {
        let Some(path) = parse_path(arg, "FROM:") else {
            return self.reply("501 5.5.4 syntax: MAIL FROM:<address>").await;
        };
        if self.from.is_some() {
            return self.reply("503 5.5.1 nested MAIL command").await;
        }
        let refused = {
            let mut state = self.shared.state();
            let refused = state.refuse > 0;
            state.refuse = state.refuse.saturating_sub(1);
            refused
        };
        if refused {
            return self.reply("451 4.3.0 try again later").await;
        }
        self.from = Some(path);
        self.reply("250 2.1.0 OK").await
    }

    async fn rcpt(&mut self, arg: &str) -> std::io::Result<()> {
        let Some(path) = parse_path(arg, "TO:") else {
            return self.reply("501 5.5.4 syntax: RCPT TO:<address>").await;
        };
        if self.from.is_none() {
            return self.reply("503 5.5.1 MAIL first").await;
        }
        self.to.push(path);
        self.reply("250 2.1.5 OK").await
    }

    /// `DATA` up to the final dot. `None` if the client left in the middle.
    async fn data(&mut self) -> std::io::Result<Option<()>> {
        if self.from.is_none() || self.to.is_empty() {
            self.reply("503 5.5.1 MAIL and RCPT first").await?;
            return Ok(Some(()));
        }
        self.reply("354 end data with <CR><LF>.<CR><LF>").await?;
        let mut data = Vec::new();
        loop {
            let mut line = Vec::new();
            if self.read.read_until(b'\n', &mut line).await? == 0 {
                return Ok(None);
            }
            if line == b".\r\n" || line == b".\n" {
                break;
            }
            // Dot-unstuffing (RFC 5321 4.5.2): a line starting with a dot lost one.
            let line = line.strip_prefix(b".").unwrap_or(&line);
            data.extend_from_slice(line);
        }
        // The last line's CRLF is the first half of the terminating <CRLF>.<CRLF>.
        if data.ends_with(b"\r\n") {
            data.truncate(data.len() - 2);
        } else if data.ends_with(b"\n") {
            data.truncate(data.len() - 1);
        }
        let mail = Mail {
            from: self.from.take().unwrap_or_default(),
            to: std::mem::take(&mut self.to),
            user: self.user.clone(),
            data: String::from_utf8_lossy(&data).into_owned(),
        };
        self.shared.state().messages.push(mail);
        self.shared.arrived.notify_waiters();
        self.reply("250 2.0.0 OK queued").await?;
        Ok(Some(()))
    }

    /// The next command line without its line ending; `None` when the client closed.
    async fn line(&mut self) -> std::io::Result<Option<String>> {
        let mut line = Vec::new();
        if self.read.read_until(b'\n', &mut line).await? == 0 {
            return Ok(None);
        }
        let line = line.strip_suffix(b"\n").unwrap_or(&line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        Ok(Some(String::from_utf8_lossy(line).into_owned()))
    }

    /// Sends one reply (several lines separated by CRLF for a multi-line one).
    async fn reply(&mut self, text: &str) -> std::io::Result<()> {
        self.write
            .write_all(format!("{text}\r\n").as_bytes())
            .await?;
        self.write.flush().await
    }
}

/// The address of `FROM:<address> PARAMS` or `TO:<address> PARAMS`, without the brackets.
fn parse_path(arg: &str, keyword: &str) -> Option<String> {
    let head = arg.get(..keyword.len())?;
    if !head.eq_ignore_ascii_case(keyword) {
        return None;
    }
    let rest = arg[keyword.len()..].trim_start();
    let inner = rest.strip_prefix('<')?;
    let end = inner.find('>')?;
    Some(inner[..end].to_owned())
}

/// The header section and the body of a message (the body is empty if there is no blank line).
fn split_message(data: &str) -> (&str, &str) {
    // No headers at all: the blank line is the first line.
    if let Some(body) = data
        .strip_prefix("\r\n")
        .or_else(|| data.strip_prefix('\n'))
    {
        return ("", body);
    }
    match data.find("\r\n\r\n") {
        Some(at) => (&data[..at], &data[at + 4..]),
        None => match data.find("\n\n") {
            Some(at) => (&data[..at], &data[at + 2..]),
            None => (data, ""),
        },
    }
}

/// The headers as (name, value) pairs, continuation lines joined to the line they continue.
fn unfolded_headers(head: &str) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in head.lines() {
        if line.starts_with([' ', '\t']) {
            // Unfolding (RFC 5322 2.2.3) removes the line break and keeps the whitespace.
            if let Some((_, value)) = headers.last_mut() {
                value.push_str(line);
            }
        } else if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_owned(), value.to_owned()));
        }
    }
    headers
        .into_iter()
        .map(|(name, value)| (name, value.trim().to_owned()))
        .collect()
}

/// Decodes the encoded words (RFC 2047) of a header value; whitespace between two adjacent
/// encoded words is dropped, as the RFC says. Every charset is read as UTF-8.
fn decode_words(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    let mut after_word = false;
    while let Some(at) = rest.find("=?") {
        let (before, word) = rest.split_at(at);
        match decode_word(word) {
            Some((decoded, len)) => {
                if !(after_word && before.chars().all(|c| c == ' ' || c == '\t')) {
                    out.push_str(before);
                }
                out.push_str(&decoded);
                rest = &word[len..];
                after_word = true;
            }
            None => {
                out.push_str(before);
                out.push_str("=?");
                rest = &word[2..];
                after_word = false;
            }
        }
    }
    out.push_str(rest);
    out
}

/// One encoded word `=?charset?B|Q?text?=` at the start of `word`: its text, and its length.
fn decode_word(word: &str) -> Option<(String, usize)> {
    let inner = word.strip_prefix("=?")?;
    let (_charset, rest) = inner.split_once('?')?;
    let (encoding, rest) = rest.split_once('?')?;
    let end = rest.find("?=")?;
    let text = &rest[..end];
    let bytes = match encoding {
        "B" | "b" => base64::engine::general_purpose::STANDARD
            .decode(text)
            .ok()?,
        "Q" | "q" => decode_quoted_printable(text.replace('_', " ").as_bytes()),
        _ => return None,
    };
    let len = word.len() - rest.len() + end + 2;
    Some((String::from_utf8_lossy(&bytes).into_owned(), len))
}

/// Quoted-printable (RFC 2045 6.7): `=XX` is a byte, `=` at the end of a line is a soft line
/// break (the line goes on), anything else is itself. A malformed `=` is kept as it is.
fn decode_quoted_printable(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] != b'=' {
            out.push(text[i]);
            i += 1;
            continue;
        }
        let next = &text[i + 1..];
        if next.starts_with(b"\r\n") {
            i += 3;
        } else if next.starts_with(b"\n") {
            i += 2;
        } else if let Some(byte) = next
            .get(..2)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(b'=');
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_printable_decodes_bytes_and_soft_line_breaks() {
        assert_eq!(
            String::from_utf8(decode_quoted_printable(
                b"Z=C3=BCrich =E2=80=94 5 =\r\n=E2=82=AC"
            ))
            .unwrap(),
            "Zürich — 5 €"
        );
        assert_eq!(decode_quoted_printable(b"a=zz=\nb"), b"a=zzb");
    }

    #[test]
    fn encoded_words_are_decoded_and_joined() {
        assert_eq!(
            decode_words("=?utf-8?b?WsO8cmljaA==?= =?utf-8?q?_=E2=80=94_5?= ok"),
            "Zürich — 5 ok"
        );
        assert_eq!(decode_words("plain =? text"), "plain =? text");
    }

    #[test]
    fn mail_parts() {
        let mail = Mail {
            from: "a@example.com".into(),
            to: vec!["b@example.com".into()],
            user: None,
            data: "Subject: =?utf-8?b?WsO8?=\r\n =?utf-8?b?cmljaA==?=\r\n\
                   Content-Transfer-Encoding: quoted-printable\r\n\r\nline =C3=BC\r\nnext"
                .into(),
        };
        assert_eq!(mail.subject().as_deref(), Some("Zürich"));
        assert_eq!(mail.body(), "line ü\nnext");
        assert_eq!(
            mail.header("content-transfer-encoding").as_deref(),
            Some("quoted-printable")
        );
        assert_eq!(mail.header("To"), None);
    }

    /// A client speaking raw SMTP, reading whole (multi-line) replies.
    struct Client {
        read: BufReader<tokio::net::tcp::OwnedReadHalf>,
        write: tokio::net::tcp::OwnedWriteHalf,
    }

    impl Client {
        async fn connect(sink: &SmtpSink) -> Client {
            let (read, write) = TcpStream::connect(sink.addr()).await.unwrap().into_split();
            let mut client = Client {
                read: BufReader::new(read),
                write,
            };
            assert!(client.reply().await.starts_with("220 "));
            client
        }

        async fn reply(&mut self) -> String {
            let mut reply = String::new();
            loop {
                let mut line = String::new();
                assert_ne!(self.read.read_line(&mut line).await.unwrap(), 0, "closed");
                reply.push_str(&line);
                if line.as_bytes().get(3) != Some(&b'-') {
                    return reply;
                }
            }
        }

        /// Sends `line` and checks that the reply starts with `code`; returns the reply.
        async fn say(&mut self, line: &str, code: &str) -> String {
            self.write
                .write_all(format!("{line}\r\n").as_bytes())
                .await
                .unwrap();
            let reply = self.reply().await;
            assert!(reply.starts_with(code), "{line:?} got {reply:?}");
            reply
        }
    }

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    #[tokio::test]
    async fn speaks_smtp() {
        let sink = SmtpSink::start().await;
        let mut c = Client::connect(&sink).await;
        let ehlo = c.say("EHLO client.test", "250-").await;
        assert!(ehlo.contains("250 AUTH PLAIN LOGIN\r\n"), "{ehlo}");
        assert!(
            ehlo.contains("8BITMIME") && !ehlo.contains("STARTTLS"),
            "{ehlo}"
        );
        c.say("HELO client.test", "250 ").await;
        c.say("VRFY bob", "502 ").await;
        c.say("NOOP", "250 ").await;
        c.say("RCPT TO:<b@example.com>", "503 ").await;
        c.say("DATA", "503 ").await;
        c.say("MAIL FROM:a@example.com", "501 ").await;
        c.say("AUTH LOGIN", "334 VXNlcm5hbWU6").await;
        c.say(&b64("bob"), "334 UGFzc3dvcmQ6").await;
        c.say(&b64("pw"), "235 ").await;
        c.say("MAIL FROM:<x@example.com>", "250 ").await;
        c.say("MAIL FROM:<x@example.com>", "503 ").await;
        c.say("RCPT TO:<x@example.com>", "250 ").await;
        c.say("RSET", "250 ").await;
        c.say("mail from:<a@example.com> BODY=8BITMIME", "250 ")
            .await;
        c.say("RCPT TO:<c@example.com>", "250 ").await;
        c.say("RCPT TO:<d@example.com>", "250 ").await;
        c.say("DATA", "354 ").await;
        c.say("Subject: t\r\n\r\n..dot\r\nline\r\n.", "250 ").await;
        c.say("QUIT", "221 ").await;

        let mails = sink.messages();
        assert_eq!(
            mails,
            [Mail {
                from: "a@example.com".into(),
                to: vec!["c@example.com".into(), "d@example.com".into()],
                user: Some("bob".into()),
                data: "Subject: t\r\n\r\n.dot\r\nline".into(),
            }]
        );
        assert_eq!(mails[0].body(), ".dot\nline");
        assert_eq!(mails[0].subject().as_deref(), Some("t"));
    }

    #[tokio::test]
    async fn auth_plain_with_and_without_initial_response() {
        let sink = SmtpSink::start().await;
        let mut c = Client::connect(&sink).await;
        c.say(&format!("AUTH PLAIN {}", b64("\0alice\0pw")), "235 ")
            .await;
        c.say("AUTH PLAIN", "503 ").await;
        let mut d = Client::connect(&sink).await;
        d.say("AUTH CRAM-MD5", "504 ").await;
        d.say("AUTH PLAIN", "334 ").await;
        d.say("*", "501 ").await;
        d.say("AUTH PLAIN", "334 ").await;
        d.say(&b64("zed\0carol\0pw"), "235 ").await;
        for (client, user) in [(&mut c, "alice"), (&mut d, "carol")] {
            client.say("MAIL FROM:<>", "250 ").await;
            client.say("RCPT TO:<a@example.com>", "250 ").await;
            client.say("DATA", "354 ").await;
            client
                .say(&format!("Subject: {user}\r\n\r\nhi\r\n."), "250 ")
                .await;
        }
        let users: Vec<_> = sink
            .messages()
            .into_iter()
            .map(|m| (m.from, m.user))
            .collect();
        assert_eq!(
            users,
            [
                (String::new(), Some("alice".to_owned())),
                (String::new(), Some("carol".to_owned()))
            ]
        );
    }

    #[tokio::test]
    async fn refuse_next_refuses_that_many_transactions() {
        let sink = SmtpSink::start().await;
        sink.refuse_next(2);
        let mut c = Client::connect(&sink).await;
        let reply = c.say("MAIL FROM:<a@example.com>", "451 ").await;
        assert_eq!(reply, "451 4.3.0 try again later\r\n");
        c.say("MAIL FROM:<a@example.com>", "451 ").await;
        c.say("MAIL FROM:<a@example.com>", "250 ").await;
    }

    #[tokio::test]
    async fn wait_for_returns_when_the_messages_are_there() {
        let sink = SmtpSink::start().await;
        let waiting = sink.wait_for(2, Duration::from_secs(10));
        let sending = async {
            // Two connections open at once, each served while the other waits.
            let mut first = Client::connect(&sink).await;
            let mut second = Client::connect(&sink).await;
            for c in [&mut second, &mut first] {
                c.say("MAIL FROM:<a@example.com>", "250 ").await;
                c.say("RCPT TO:<b@example.com>", "250 ").await;
                c.say("DATA", "354 ").await;
                c.say("\r\nbody\r\n.", "250 ").await;
            }
        };
        let (mails, ()) = tokio::join!(waiting, sending);
        assert_eq!(mails.len(), 2);
        assert_eq!(mails[0].body(), "body");
    }

    #[tokio::test]
    #[should_panic(expected = "expected 1 message(s) within 50ms, got 0")]
    async fn wait_for_panics_when_nothing_comes() {
        let sink = SmtpSink::start().await;
        sink.wait_for(1, Duration::from_millis(50)).await;
    }

    #[test]
    fn paths() {
        assert_eq!(
            parse_path("FROM:<a@b> SIZE=3", "FROM:").as_deref(),
            Some("a@b")
        );
        assert_eq!(parse_path("from: <>", "FROM:").as_deref(), Some(""));
        assert_eq!(parse_path("TO:a@b", "TO:"), None);
        assert_eq!(parse_path("F", "FROM:"), None);
    }
}
