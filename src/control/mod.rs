//! The control plane: the `pghot-ctl` socket that `pghotctl` talks to, SIGHUP reloads, and the
//! optional OpenMetrics endpoint (`pghot-metrics`).
//!
//! Protocol (see [`protocol`]): JSON lines over a Unix stream socket, versioned:
//!
//! ```text
//! -> {"v":1,"req":"config_set","key":"freq_threshold","value":"3"}
//! <- {"ok":{"file":null,"applied":["freq_threshold"],"needs_restart":[]}}
//! -> {"v":1,"req":"fly"}
//! <- {"error":{"kind":"unknown_request","message":"unknown request 'fly' (known: status, ...)"}}
//! ```
//!
//! A connection may send any number of requests; each gets one answer line, except `record`,
//! whose `ok` line is followed by pghot-trace v1 text until the recording ends and the daemon
//! closes the connection. Requests over 64 KiB, malformed or unknown ones get an error answer;
//! the connection stays usable and the daemon never stops for them.
//!
//! Threads: `pghot-ctl` accepts and hands each connection to its own `pghot-ctl/conn` thread
//! (at most [`server::MAX_CONNECTIONS`], plus [`server::ROOT_RESERVED_CONNECTIONS`] that only
//! peer uid 0 may take; more get a `busy` answer), so a slow client only holds its own thread,
//! and for at most [`server::IDLE_TIMEOUT`] while it sends no complete request.
//! `pghot-metrics` serves every metrics connection itself with poll(2) (`http.rs`). `pghot-ctl/conn` threads never touch the hot path's internals: they
//! read the counter registry and the per-process counters (atomics and a mutex the samplers
//! take once per 1024 samples), scan the hotness table one shard lock at a time for the
//! per-process views, and change the daemon only through the table's policy atomics, the
//! ingest's target atomic, the pause flag and the migrators' `Reconfigure` events.
//!
//! Permissions: the socket is mode 0660, group `pghot` when that group exists. Anyone who can
//! connect may read (status, stats, top, config get); requests that change the daemon or reveal
//! other processes' addresses (config set, pause, resume, reload, migrate, record) need the peer
//! (SO_PEERCRED) to be root or a member of `pghot`.

pub mod http;
pub mod metrics;
pub mod migrate;
mod plane;
pub mod server;

pub use plane::{ControlParts, ControlPlane, ReloadFrom};

use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::thread::JoinHandle;

use crate::stop::StopToken;

/// A listener thread with its own stop token: `pghot-ctl` and `pghot-metrics`.
pub(crate) struct ServiceThread {
    name: &'static str,
    stop: StopToken,
    thread: Option<JoinHandle<()>>,
}

impl ServiceThread {
    pub(crate) fn spawn(
        name: &'static str,
        f: impl FnOnce(StopToken) + Send + 'static,
    ) -> std::io::Result<ServiceThread> {
        let stop = StopToken::new();
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || f(stop))?
        };
        Ok(ServiceThread {
            name,
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread; the token wakes it from [`wait_readable`].
    pub(crate) fn shutdown(mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!("{} thread panicked", self.name);
        }
    }
}

/// Waits until `fd` is readable (true) or `stop` is raised (false).
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, stop: &StopToken) -> Result<bool, nix::Error> {
    Ok(crate::stop::wait_fd(fd, stop, None)? == crate::stop::Woken::Ready)
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("creating the control socket directory {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("binding the control socket {}: {source}", path.display())]
    Bind {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "another pghotd is listening on {}; stop it, or give this one its own --socket PATH",
        path.display()
    )]
    InUse { path: PathBuf },
    #[error(
        "control socket path {} is {what}, not a socket; pghotd replaces only a stale socket: \
         remove it yourself or choose another --socket PATH",
        path.display()
    )]
    NotASocket { path: PathBuf, what: &'static str },
    #[error("setting the permissions of {}: {source}", path.display())]
    Permissions {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("binding metrics_listen {addr}: {source}; is the port already in use?")]
    MetricsBind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}
