//! The control socket: binding with the right permissions, the accept thread, one thread per
//! connection, request framing and the permission check.

use std::io::{self, BufWriter, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::plane::ControlPlane;
use super::{ControlError, ServiceThread, wait_readable};
use crate::sampler::trace::TraceWriter;
use crate::stats::Counter;
use crate::stop::StopToken;
use pghot_protocol::{ErrorBody, ErrorKind, MAX_REQUEST_BYTES, Request, Response, parse_request};

/// Connections served at once for peers other than root; more get a `busy` answer and are
/// closed.
pub const MAX_CONNECTIONS: usize = 16;

/// Connections beyond [`MAX_CONNECTIONS`] that only root (peer uid 0) may open, so that members
/// of the group holding every ordinary slot cannot lock root out.
pub const ROOT_RESERVED_CONNECTIONS: usize = 4;

/// A connection with no complete request for this long (since it opened or since its last
/// answer) is closed. A `record` stream or a `migrate` in progress is not waiting for a
/// request, so it is not idle.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The group whose members may change the daemon (besides root).
pub const CONTROL_GROUP: &str = "pghot";

/// The group given the read-only socket (`readonly_socket`): its members may read, never
/// change, whatever other groups they are in.
pub const READONLY_GROUP: &str = "pghot-monitor";

/// What a socket's connections may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read, and change for root and members of [`CONTROL_GROUP`] (`control_socket`).
    Full,
    /// Read only, for everyone, root included (`readonly_socket`): being able to open it
    /// grants no change, so it can be given to a monitoring group.
    ReadOnly,
}

impl Access {
    /// The group the socket file is given (mode 0660).
    pub fn group(self) -> &'static str {
        match self {
            Access::Full => CONTROL_GROUP,
            Access::ReadOnly => READONLY_GROUP,
        }
    }

    fn thread_name(self) -> &'static str {
        match self {
            Access::Full => "pghot-ctl",
            Access::ReadOnly => "pghot-ctl-ro",
        }
    }
}

/// Samples a `record` stream buffers before it drops (and counts) them.
const RECORD_BUFFER: usize = 1 << 16;

/// How often blocked reads and accepts look at the stop token.
const TICK: Duration = Duration::from_millis(100);

/// Creates the socket's directory, binds, sets mode 0660 and the group of `access` (`pghot` or
/// `pghot-monitor`, when it exists; else the group stays root's).
/// Something already at the path is replaced only when lstat(2) says it is a socket (not a
/// symlink to one) and nobody answers on it: a socket left by a daemon that died. A live
/// daemon's socket, a regular file, a directory, a FIFO or a symlink (dangling or not) is an
/// error naming the path, and is left as it was.
pub fn bind(path: &Path, access: Access) -> Result<UnixListener, ControlError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        std::fs::create_dir_all(dir).map_err(|source| ControlError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let bind_err = |source| ControlError::Bind {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(bind_err(e)),
        Ok(meta) => {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(ControlError::NotASocket {
                    path: path.to_path_buf(),
                    what: crate::safefs::kind_name(&meta),
                });
            }
            if UnixStream::connect(path).is_ok() {
                return Err(ControlError::InUse {
                    path: path.to_path_buf(),
                });
            }
            tracing::info!("replacing stale control socket {}", path.display());
            std::fs::remove_file(path).map_err(bind_err)?;
        }
    }
    // A path that appeared since the lstat is not removed: bind fails with EADDRINUSE.
    let listener = UnixListener::bind(path).map_err(bind_err)?;
    let perm_err = |source| ControlError::Permissions {
        path: path.to_path_buf(),
        source,
    };
    // chmod(2) follows symlinks: check the path is still the socket just bound.
    let still_socket = std::fs::symlink_metadata(path).map_err(perm_err)?;
    if !std::os::unix::fs::FileTypeExt::is_socket(&still_socket.file_type()) {
        return Err(ControlError::NotASocket {
            path: path.to_path_buf(),
            what: crate::safefs::kind_name(&still_socket),
        });
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(perm_err)?;
    if let Some(gid) = group_gid(access.group()) {
        nix::unistd::fchownat(
            nix::fcntl::AT_FDCWD,
            path,
            None,
            Some(nix::unistd::Gid::from_raw(gid)),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|e| perm_err(e.into()))?;
    }
    Ok(listener)
}

/// The gid of group `name` (`pghot`, `pghot-monitor`), if it exists.
pub fn group_gid(name: &str) -> Option<u32> {
    // A statically linked glibc cannot load NSS modules: getgrnam dlopens the ones
    // nsswitch.conf names (libnss_systemd on most hosts), which pulls a second libc into the
    // process and crashes it. Static builds (the QEMU rig's) read /etc/group themselves.
    if cfg!(target_feature = "crt-static") {
        return crate::safefs::read_text(
            std::path::Path::new("/etc/group"),
            crate::safefs::limit::GROUP_FILE,
        )
        .ok()
        .and_then(|text| gid_in_group_file(&text, name));
    }
    nix::unistd::Group::from_name(name)
        .ok()
        .flatten()
        .map(|g| g.gid.as_raw())
}

/// The gid of group `name` in the text of an /etc/group file (`name:password:gid:members`).
fn gid_in_group_file(text: &str, name: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        fields.nth(1)?.parse().ok()
    })
}

/// Who is on the other end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
    /// Root, or a member of `pghot`.
    pub may_change: bool,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} uid {}", self.pid, self.uid)
    }
}

/// SO_PEERCRED.
fn peer_credentials(stream: &UnixStream) -> Option<nix::sys::socket::UnixCredentials> {
    nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials).ok()
}

/// The credentials, and the peer's groups from /proc/PID/status. A peer whose credentials
/// cannot be read may only read, and so may every peer of a read-only socket.
fn peer_of(
    cred: Option<nix::sys::socket::UnixCredentials>,
    control_gid: Option<u32>,
    access: Access,
) -> Peer {
    let Some(cred) = cred else {
        return Peer {
            pid: -1,
            uid: u32::MAX,
            may_change: false,
        };
    };
    let in_group = || {
        control_gid
            .is_some_and(|g| cred.gid() == g || supplementary_groups(cred.pid()).contains(&g))
    };
    Peer {
        pid: cred.pid(),
        uid: cred.uid(),
        may_change: access == Access::Full && (cred.uid() == 0 || in_group()),
    }
}

/// The `Groups:` of /proc/PID/status (empty when the process is gone).
fn supplementary_groups(pid: i32) -> Vec<u32> {
    let path = PathBuf::from(format!("/proc/{pid}/status"));
    crate::safefs::read_proc::<procfs::process::Status>(&path, crate::safefs::limit::STATUS)
        .map(|status| status.groups)
        .unwrap_or_default()
}

/// The running control server.
pub struct ControlServer {
    path: PathBuf,
    thread: ServiceThread,
}

impl ControlServer {
    /// Spawns `pghot-ctl` (or `pghot-ctl-ro`) on a bound listener.
    pub fn spawn(
        listener: UnixListener,
        path: PathBuf,
        plane: Arc<ControlPlane>,
        access: Access,
    ) -> io::Result<ControlServer> {
        let gid = group_gid(CONTROL_GROUP);
        let thread = ServiceThread::spawn(access.thread_name(), move |stop| {
            accept_loop(&listener, &plane, &stop, gid, access)
        })?;
        Ok(ControlServer { path, thread })
    }

    /// Stops accepting, lets connections end within a tick, removes the socket file.
    pub fn shutdown(self) {
        self.thread.shutdown();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(
    listener: &UnixListener,
    plane: &Arc<ControlPlane>,
    stop: &StopToken,
    gid: Option<u32>,
    access: Access,
) {
    let active = Arc::new(AtomicUsize::new(0));
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::error!("control socket: {e}; not serving");
        return;
    }
    loop {
        match wait_readable(listener.as_fd(), stop) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::error!("control socket poll: {e}; not serving");
                return;
            }
        }
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                tracing::warn!("control socket accept: {e}");
                continue;
            }
        };
        let cred = peer_credentials(&stream);
        let root = cred.is_some_and(|c| c.uid() == 0);
        if !slot_free(active.load(Ordering::Relaxed), root) {
            let _ = stream.set_nonblocking(false);
            let _ = stream.set_write_timeout(Some(TICK));
            let body = ErrorBody::new(
                ErrorKind::Busy,
                format!("{MAX_CONNECTIONS} control connections are open; try again later"),
            );
            let _ = (&stream).write_all(Response::Error(body).to_line().as_bytes());
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let guard = ActiveGuard(Arc::clone(&active));
        let plane = Arc::clone(plane);
        let stop = stop.clone();
        let spawned = std::thread::Builder::new()
            .name("pghot-ctl/conn".into())
            .spawn(move || {
                serve(&stream, &plane, &stop, peer_of(cred, gid, access), access);
                // The slot is free before the client sees the connection close, so a client
                // that waits for the close can count on the slot (tests/adversarial_io.rs).
                drop(guard);
                drop(stream);
            });
        if let Err(e) = spawned {
            tracing::warn!("control connection thread: {e}");
        }
    }
}

/// Whether a new connection may be served with `active` open: the ordinary slots for anyone,
/// the reserved ones for root only.
pub fn slot_free(active: usize, root: bool) -> bool {
    active < MAX_CONNECTIONS || (root && active < MAX_CONNECTIONS + ROOT_RESERVED_CONNECTIONS)
}

struct ActiveGuard(Arc<AtomicUsize>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What reading a request line gave.
pub enum Line {
    Request(Vec<u8>),
    TooLong,
    Closed,
    /// No complete line before the deadline.
    Idle,
}

/// Reads newline-framed requests of at most [`MAX_REQUEST_BYTES`]; the rest of an over-long
/// line is read and thrown away, so the next request on the connection still parses.
pub struct LineReader {
    buf: Vec<u8>,
    start: usize,
    discarding: bool,
}

impl Default for LineReader {
    fn default() -> Self {
        Self::new()
    }
}

impl LineReader {
    pub fn new() -> Self {
        LineReader {
            buf: Vec::with_capacity(4096),
            start: 0,
            discarding: false,
        }
    }

    pub fn next(&mut self, stream: &mut impl Read, stop: &StopToken) -> Line {
        self.next_before(stream, stop, None)
    }

    /// As [`LineReader::next`], giving up with [`Line::Idle`] once `deadline` has passed
    /// without a complete line: one deadline for the whole line, however the bytes trickle in.
    /// The stream needs a read timeout for the deadline to be seen while no byte comes.
    pub fn next_before(
        &mut self,
        stream: &mut impl Read,
        stop: &StopToken,
        deadline: Option<Instant>,
    ) -> Line {
        loop {
            if let Some(i) = self.buf[self.start..].iter().position(|&b| b == b'\n') {
                let line = self.buf[self.start..self.start + i].to_vec();
                self.start += i + 1;
                if std::mem::take(&mut self.discarding) || i >= MAX_REQUEST_BYTES {
                    return Line::TooLong;
                }
                return Line::Request(line);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Line::Idle;
            }
            // Compact what was consumed.
            self.buf.drain(..self.start);
            self.start = 0;
            if self.buf.len() >= MAX_REQUEST_BYTES {
                self.discarding = true;
                self.buf.clear();
            }
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk) {
                Ok(0) => return Line::Closed,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) || e.kind() == io::ErrorKind::Interrupted =>
                {
                    if stop.is_stopped() {
                        return Line::Closed;
                    }
                }
                Err(_) => return Line::Closed,
            }
        }
    }
}

fn serve(stream: &UnixStream, plane: &ControlPlane, stop: &StopToken, peer: Peer, access: Access) {
    let mut stream = stream;
    let configured = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(TICK)))
        // A client that stops reading must not hold this thread for long.
        .and_then(|()| stream.set_write_timeout(Some(Duration::from_secs(5))));
    if let Err(e) = configured {
        tracing::warn!("control connection from {peer}: {e}");
        return;
    }
    let mut reader = LineReader::new();
    loop {
        let idle_deadline = Instant::now() + IDLE_TIMEOUT;
        let answer = match reader.next_before(&mut stream, stop, Some(idle_deadline)) {
            Line::Closed => return,
            Line::Idle => {
                tracing::debug!("control {peer}: idle for {IDLE_TIMEOUT:?}; closed");
                return;
            }
            Line::TooLong => Err(ErrorBody::new(
                ErrorKind::TooLarge,
                format!("request longer than {MAX_REQUEST_BYTES} bytes (64 KiB); not read"),
            )),
            Line::Request(bytes) => match std::str::from_utf8(&bytes) {
                Err(_) => Err(ErrorBody::new(
                    ErrorKind::BadRequest,
                    "request is not UTF-8",
                )),
                Ok(text) if text.trim().is_empty() => continue,
                Ok(text) => match parse_request(text.trim()) {
                    Err(e) => Err(e),
                    Ok(req) if req.is_privileged() && !peer.may_change => {
                        Err(refusal(&req, peer, access))
                    }
                    Ok(Request::Record { duration_s }) => {
                        plane.stats().add(Counter::ControlRequests, 1);
                        record(stream, plane, stop, duration_s, peer);
                        return;
                    }
                    Ok(req) => {
                        let answer = plane.handle(&req);
                        if let Err(e) = &answer {
                            tracing::info!("control {peer}: {}: {}", request_name(&req), e.message);
                        }
                        answer
                    }
                },
            },
        };
        plane.stats().add(Counter::ControlRequests, 1);
        let response = match answer {
            Ok(v) => Response::Ok(v),
            Err(e) => {
                plane.stats().add(Counter::ControlErrors, 1);
                tracing::debug!("control {peer}: {}", e.message);
                Response::Error(e)
            }
        };
        if stream.write_all(response.to_line().as_bytes()).is_err() {
            return;
        }
    }
}

/// The answer to a request that changes the daemon from a peer that may only read.
fn refusal(req: &Request, peer: Peer, access: Access) -> ErrorBody {
    let name = request_name(req);
    let message = match access {
        Access::ReadOnly => format!(
            "{name} changes the daemon, and this is its read-only socket (readonly_socket): \
             use the control socket as root or a member of group {CONTROL_GROUP}"
        ),
        Access::Full => format!(
            "{name} changes the daemon: it needs root or membership in group {CONTROL_GROUP} \
             (you are uid {})",
            peer.uid
        ),
    };
    ErrorBody::new(ErrorKind::PermissionDenied, message)
}

fn request_name(req: &Request) -> String {
    serde_json::to_value(req)
        .ok()
        .and_then(|v| v.get("req").and_then(|r| r.as_str()).map(str::to_string))
        .unwrap_or_else(|| "request".into())
}

/// Ends the tap however the stream ends.
struct TapGuard<'a>(&'a ControlPlane);

impl Drop for TapGuard<'_> {
    fn drop(&mut self) {
        self.0.ingest().stop_tap();
    }
}

/// A `record` request's `duration_s`: positive and finite, and within what a `Duration` holds
/// (`Duration::from_secs_f64` panics past that; `1e300` once killed the connection thread).
pub fn record_duration(s: f64) -> Result<Duration, ErrorBody> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            ErrorBody::new(
                ErrorKind::InvalidValue,
                format!("duration_s {s}: must be a positive number of seconds"),
            )
        })
}

/// Streams samples as pghot-trace v1 after an `ok` line, until the duration passes, the client
/// hangs up or the daemon stops. The trace ends with a comment line with the counts.
fn record(
    stream: &UnixStream,
    plane: &ControlPlane,
    stop: &StopToken,
    duration_s: Option<f64>,
    peer: Peer,
) {
    let mut stream = stream;
    let duration = match duration_s.map(record_duration).transpose() {
        Ok(d) => d,
        Err(body) => {
            let _ = stream.write_all(Response::Error(body).to_line().as_bytes());
            return;
        }
    };
    let Some(rx) = plane.ingest().start_tap(RECORD_BUFFER) else {
        let body = ErrorBody::new(ErrorKind::Busy, "another pghotctl record is running");
        let _ = stream.write_all(Response::Error(body).to_line().as_bytes());
        return;
    };
    let _tap = TapGuard(plane);
    tracing::info!("control {peer}: record started");
    let dropped_before = plane.stats().get(Counter::RecordDroppedSamples);
    let ok = Response::Ok(serde_json::json!({ "format": "pghot-trace v1" })).to_line();
    if stream.write_all(ok.as_bytes()).is_err() {
        return;
    }
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let Ok(mut out) = TraceWriter::new(BufWriter::with_capacity(1 << 16, write_half)) else {
        return;
    };
    // A duration past what an Instant holds (`duration_s` 1e19) is no deadline in practice.
    let deadline = duration.and_then(|d| Instant::now().checked_add(d));
    let mut samples = 0u64;
    let ended = loop {
        if stop.is_stopped() || plane.stop_token().is_stopped() {
            break "the daemon is stopping";
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break "duration reached";
        }
        if client_gone(stream) {
            break "the client hung up";
        }
        match rx.recv_timeout(TICK) {
            Ok(s) => {
                if out.write_sample(&s).is_err() {
                    break "the client hung up";
                }
                samples += 1;
                // Whatever else is waiting goes in the same write.
                for s in rx.try_iter().take(4096) {
                    if out.write_sample(&s).is_err() {
                        break;
                    }
                    samples += 1;
                }
            }
            Err(_) => {
                if out.flush().is_err() {
                    break "the client hung up";
                }
            }
        }
    };
    // Samples that arrived before the tap closed still belong to the recording.
    plane.ingest().stop_tap();
    for s in rx.try_iter() {
        if out.write_sample(&s).is_err() {
            break;
        }
        samples += 1;
    }
    let dropped = plane.stats().get(Counter::RecordDroppedSamples) - dropped_before;
    let mut inner = out.into_inner();
    let _ = writeln!(
        inner,
        "# pghotd record: {samples} samples, {dropped} dropped (buffer full); ended: {ended}"
    );
    let _ = inner.flush();
    tracing::info!("control {peer}: record ended ({ended}): {samples} samples, {dropped} dropped");
}

/// True when the client has closed its end (a peek returns 0 bytes without waiting).
fn client_gone(stream: &UnixStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut byte = [0u8; 1];
    let flags = nix::sys::socket::MsgFlags::MSG_PEEK | nix::sys::socket::MsgFlags::MSG_DONTWAIT;
    matches!(
        nix::sys::socket::recv(stream.as_raw_fd(), &mut byte, flags),
        Ok(0) | Err(nix::errno::Errno::ECONNRESET)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_only_socket_grants_no_change_to_root_or_the_group() {
        let me = std::process::id() as i32;
        let cred = |uid, gid| {
            Some(nix::sys::socket::UnixCredentials::from(libc::ucred {
                pid: me,
                uid,
                gid,
            }))
        };
        let group = Some(4242);
        let may = |cred, access| peer_of(cred, group, access).may_change;
        assert!(may(cred(0, 0), Access::Full));
        assert!(may(cred(1000, 4242), Access::Full));
        assert!(!may(cred(1000, 1000), Access::Full));
        assert!(!may(cred(0, 0), Access::ReadOnly));
        assert!(!may(cred(1000, 4242), Access::ReadOnly));
        // The peer is still named in the logs.
        assert_eq!(peer_of(cred(1000, 4242), group, Access::ReadOnly).uid, 1000);
    }

    #[test]
    fn supplementary_groups_are_the_kernels() {
        let mut want: Vec<u32> = nix::unistd::getgroups()
            .unwrap()
            .iter()
            .map(|g| g.as_raw())
            .collect();
        want.sort_unstable();
        let mut got = supplementary_groups(std::process::id() as i32);
        got.sort_unstable();
        assert_eq!(got, want);
        assert!(supplementary_groups(-1).is_empty());
    }

    #[test]
    fn root_has_slots_the_others_cannot_take() {
        assert!(slot_free(MAX_CONNECTIONS - 1, false));
        assert!(!slot_free(MAX_CONNECTIONS, false));
        assert!(slot_free(MAX_CONNECTIONS, true));
        let all = MAX_CONNECTIONS + ROOT_RESERVED_CONNECTIONS;
        assert!(slot_free(all - 1, true));
        assert!(!slot_free(all, true));
    }

    #[test]
    fn a_line_that_trickles_in_past_the_deadline_is_idle() {
        let (mut client, mut server) = UnixStream::pair().unwrap();
        server
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let stop = StopToken::new();
        let mut reader = LineReader::new();
        // Half a line, then a byte every 30 ms: the deadline is for the line, not per byte.
        client.write_all(b"{\"v\":1,").unwrap();
        let writer = std::thread::spawn(move || {
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(30));
                if client.write_all(b" ").is_err() {
                    break;
                }
            }
            client
        });
        let started = Instant::now();
        let deadline = started + Duration::from_millis(200);
        assert!(matches!(
            reader.next_before(&mut server, &stop, Some(deadline)),
            Line::Idle
        ));
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_secs(1),
            "{took:?}"
        );
        let mut client = writer.join().unwrap();
        // A complete line is still read before its deadline.
        client.write_all(b"\n").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        assert!(matches!(
            reader.next_before(&mut server, &stop, Some(deadline)),
            Line::Request(_)
        ));
    }

    #[test]
    fn a_group_file_gives_the_gid_of_the_named_group_only() {
        let text = "root:x:0:\npghotd:x:998:\npghot:x:997:alice,bob\nbroken\n";
        assert_eq!(gid_in_group_file(text, "pghot"), Some(997));
        assert_eq!(gid_in_group_file(text, "root"), Some(0));
        assert_eq!(gid_in_group_file(text, "pgho"), None);
        assert_eq!(gid_in_group_file("pghot:x:many:\n", "pghot"), None);
        assert_eq!(gid_in_group_file("pghot\n", "pghot"), None);
    }
}
