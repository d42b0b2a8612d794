//! The metrics endpoint's HTTP server: one `pghot-metrics` thread multiplexing every
//! connection with poll(2), non-blocking sockets and a deadline per connection.
//!
//! Why not a thread per connection or an HTTP crate: the endpoint answers one request per
//! connection with one snapshot; what it must survive is clients that connect and then send
//! nothing, trickle a byte at a time, or never read the answer. With non-blocking sockets and
//! poll a stalled client costs one slot and no thread; the head has one deadline for the whole
//! head (not per read, which a byte every 1.5 s defeated), the answer another; shutdown only
//! drops the sockets; and everything is bounded by [`MAX_CONNECTIONS`] slots, each holding at
//! most [`MAX_HEAD_BYTES`] of request and one answer. An HTTP server crate would bring a
//! runtime or a thread pool whose limits would still have to be set and tested here.
//!
//! [`parse_head`] is a pure function over the bytes received so far (fuzzed by `pghot-fuzz`).

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::stop::StopToken;

/// A request head longer than this is answered 431 and not read further.
pub const MAX_HEAD_BYTES: usize = 8192;

/// Connections held at once. When all are taken, a new connection replaces the one that has
/// waited longest for its request head; if every slot is sending an answer, it is closed.
pub const MAX_CONNECTIONS: usize = 32;

/// Time from accept to a complete request head, however the bytes arrive.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(2);

/// Time to take the whole answer once the request is complete.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(10);

/// How often the loop looks at the stop token while nothing happens.
const TICK: Duration = Duration::from_millis(100);

/// What the bytes received so far on a connection say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head<'a> {
    /// The head has not ended yet and is within [`MAX_HEAD_BYTES`]: wait for more.
    Incomplete,
    /// A complete head whose request line is `METHOD TARGET [HTTP/x.y]`.
    Request { method: &'a str, target: &'a str },
    /// A complete head whose request line is not one: 400.
    Bad,
    /// No end of head within [`MAX_HEAD_BYTES`]: 431.
    TooLarge,
}

/// Parses the bytes received so far. The head ends at the first empty line (`\r\n\r\n` or
/// `\n\n`, whichever ends first); only its first line is looked at. Once the answer is not
/// [`Head::Incomplete`], more bytes do not change it.
pub fn parse_head(buf: &[u8]) -> Head<'_> {
    match head_end(buf) {
        Some(end) if end <= MAX_HEAD_BYTES => request_line(&buf[..end]),
        _ if buf.len() > MAX_HEAD_BYTES => Head::TooLarge,
        Some(_) => Head::TooLarge,
        None => Head::Incomplete,
    }
}

/// The index just past the first empty line, if any.
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.iter().enumerate().find_map(|(i, &b)| {
        let blank = b == b'\n'
            && ((i >= 1 && buf[i - 1] == b'\n') || (i >= 2 && &buf[i - 2..i] == b"\n\r"));
        blank.then_some(i + 1)
    })
}

fn request_line(head: &[u8]) -> Head<'_> {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Ok(line) = std::str::from_utf8(line) else {
        return Head::Bad;
    };
    let mut parts = line.split(' ');
    let (Some(method), Some(target), version, None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Head::Bad;
    };
    let method_ok = !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase());
    let target_ok = !target.is_empty() && target.bytes().all(|b| b.is_ascii_graphic());
    let version_ok = version.is_none_or(|v| {
        v.strip_prefix("HTTP/")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
    });
    if method_ok && target_ok && version_ok {
        Head::Request { method, target }
    } else {
        Head::Bad
    }
}

/// One connection: reading its head, then writing its answer, each before a deadline.
struct Conn {
    stream: TcpStream,
    accepted: Instant,
    deadline: Instant,
    state: State,
}

enum State {
    Reading(Vec<u8>),
    Writing { out: Vec<u8>, sent: usize },
}

/// Serves `listener` (non-blocking) until `stop`; `answer` turns a complete head into the bytes
/// of the whole response. Returns when stopped, dropping whatever connections are open.
pub fn serve(listener: &TcpListener, stop: &StopToken, answer: &dyn Fn(&Head) -> Vec<u8>) {
    let mut conns: Vec<Conn> = Vec::new();
    while !stop.is_stopped() {
        let now = Instant::now();
        conns.retain(|c| c.deadline > now);
        let timeout = conns
            .iter()
            .map(|c| c.deadline.saturating_duration_since(now))
            .fold(TICK, Duration::min);
        let ready = match wait(listener, &conns, timeout) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("metrics poll: {e}; not serving");
                return;
            }
        };
        let mut i = 0;
        conns.retain_mut(|c| {
            let events = ready.conns[i];
            i += 1;
            events.is_empty() || step(c, answer)
        });
        if ready.listener {
            accept(listener, &mut conns);
        }
    }
}

struct Ready {
    listener: bool,
    conns: Vec<PollFlags>,
}

/// One poll(2) over the listener and every connection.
fn wait(listener: &TcpListener, conns: &[Conn], timeout: Duration) -> nix::Result<Ready> {
    let mut fds = Vec::with_capacity(conns.len() + 1);
    fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
    for c in conns {
        let want = match c.state {
            State::Reading(_) => PollFlags::POLLIN,
            State::Writing { .. } => PollFlags::POLLOUT,
        };
        fds.push(PollFd::new(c.stream.as_fd(), want));
    }
    // Rounded up, so a deadline a fraction of a millisecond away is not a busy loop.
    let ms = u16::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(u16::MAX);
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => {
            return Ok(Ready {
                listener: false,
                conns: vec![PollFlags::empty(); conns.len()],
            });
        }
        Err(e) => return Err(e),
    }
    let revents: Vec<PollFlags> = fds
        .iter()
        .map(|f| f.revents().unwrap_or(PollFlags::empty()))
        .collect();
    Ok(Ready {
        listener: !revents[0].is_empty(),
        conns: revents[1..].to_vec(),
    })
}

/// Accepts what is waiting, within the connection cap.
fn accept(listener: &TcpListener, conns: &mut Vec<Conn>) {
    for _ in 0..MAX_CONNECTIONS {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) => {
                tracing::warn!("metrics accept: {e}");
                return;
            }
        };
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        if conns.len() >= MAX_CONNECTIONS {
            // The connection that has waited longest for its head gives way; with every slot
            // sending an answer, the newcomer is closed.
            let oldest = conns
                .iter()
                .enumerate()
                .filter(|(_, c)| matches!(c.state, State::Reading(_)))
                .min_by_key(|(_, c)| c.accepted)
                .map(|(i, _)| i);
            match oldest {
                Some(i) => {
                    conns.swap_remove(i);
                }
                None => continue,
            }
        }
        let now = Instant::now();
        conns.push(Conn {
            stream,
            accepted: now,
            deadline: now + HEAD_DEADLINE,
            state: State::Reading(Vec::with_capacity(1024)),
        });
    }
}

/// Reads or writes what the socket allows; false when the connection is done (answered,
/// closed by the client, or failed).
fn step(c: &mut Conn, answer: &dyn Fn(&Head) -> Vec<u8>) -> bool {
    if let State::Reading(buf) = &mut c.state {
        let mut chunk = [0u8; 2048];
        loop {
            match c.stream.read(&mut chunk) {
                // Closed before a complete head: nothing to answer.
                Ok(0) => return false,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.len() > MAX_HEAD_BYTES {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        let head = parse_head(buf);
        if head == Head::Incomplete {
            return true;
        }
        let out = answer(&head);
        c.state = State::Writing { out, sent: 0 };
        c.deadline = Instant::now() + ANSWER_DEADLINE;
    }
    let State::Writing { out, sent } = &mut c.state else {
        return true;
    };
    while *sent < out.len() {
        match c.stream.write(&out[*sent..]) {
            Ok(0) => return false,
            Ok(n) => *sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    let _ = c.stream.shutdown(std::net::Shutdown::Write);
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_parse_to_their_request_line() {
        let get = |target| Head::Request {
            method: "GET",
            target,
        };
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            get("/metrics")
        );
        assert_eq!(parse_head(b"GET / HTTP/1.0\n\n"), get("/"));
        assert_eq!(parse_head(b"GET /metrics\r\n\r\n"), get("/metrics"));
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"),
            Head::Incomplete
        );
        assert_eq!(parse_head(b""), Head::Incomplete);
        assert_eq!(parse_head(b"\n\n"), Head::Bad);
        assert_eq!(parse_head(b"get / HTTP/1.1\r\n\r\n"), Head::Bad);
        assert_eq!(parse_head(b"GET  / HTTP/1.1\r\n\r\n"), Head::Bad);
        assert_eq!(parse_head(b"GET / FTP/1\r\n\r\n"), Head::Bad);
        assert_eq!(parse_head(b"GET / HTTP/1.1 x\r\n\r\n"), Head::Bad);
        assert_eq!(parse_head(b"GET /\xff HTTP/1.1\r\n\r\n"), Head::Bad);
        // The first blank line ends the head; what follows changes nothing.
        assert_eq!(
            parse_head(b"POST /x HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n").clone(),
            {
                Head::Request {
                    method: "POST",
                    target: "/x",
                }
            }
        );
        let long = [b"GET /".as_slice(), &[b'a'; MAX_HEAD_BYTES], b"\r\n\r\n"].concat();
        assert_eq!(parse_head(&long), Head::TooLarge);
        assert_eq!(parse_head(&long[..MAX_HEAD_BYTES + 1]), Head::TooLarge);
        assert_eq!(parse_head(&long[..MAX_HEAD_BYTES]), Head::Incomplete);
    }
}
