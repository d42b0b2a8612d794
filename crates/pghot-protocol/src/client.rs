//! The client side of the control socket, used by `pghotctl`.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::{ErrorBody, Request, Response};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no pghotd is listening on {}: {err}\n\nIs pghotd running? Start it (systemctl start \
         pghotd), or point pghotctl at its socket with --socket PATH.",
        path.display()
    )]
    NotRunning { path: PathBuf, err: io::Error },
    #[error(
        "connecting to {}: permission denied\n\nThe control socket is for root and the group \
         pghot (a read-only socket, if pghotd has one, for the group pghot-monitor); run as root \
         or ask for membership.",
        path.display()
    )]
    Permission { path: PathBuf },
    #[error("connecting to {}: {err}", path.display())]
    Connect { path: PathBuf, err: io::Error },
    #[error("talking to pghotd on {}: {err}", path.display())]
    Io { path: PathBuf, err: io::Error },
    #[error("pghotd on {} closed the connection", path.display())]
    Closed { path: PathBuf },
    #[error("pghotd sent an answer pghotctl does not understand: {0}")]
    Protocol(String),
    /// The daemon answered with an error.
    #[error("pghotd: {0}")]
    Daemon(ErrorBody),
}

/// A connection to the daemon.
pub struct Client {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path).map_err(|source| match source.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => ClientError::NotRunning {
                path: path.to_path_buf(),
                err: source,
            },
            io::ErrorKind::PermissionDenied => ClientError::Permission {
                path: path.to_path_buf(),
            },
            _ => ClientError::Connect {
                path: path.to_path_buf(),
                err: source,
            },
        })?;
        let io_err = |err| ClientError::Io {
            path: path.to_path_buf(),
            err,
        };
        // A migrate can run for a long time; everything else answers at once.
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .map_err(io_err)?;
        let writer = stream.try_clone().map_err(io_err)?;
        Ok(Client {
            path: path.to_path_buf(),
            reader: BufReader::new(stream),
            writer,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, err: io::Error) -> ClientError {
        ClientError::Io {
            path: self.path.clone(),
            err,
        }
    }

    /// Sends a raw line and reads one answer line (for tests and `record`).
    pub fn send_line(&mut self, line: &str) -> Result<String, ClientError> {
        self.writer
            .write_all(line.as_bytes())
            .map_err(|e| self.io(e))?;
        let mut answer = String::new();
        let n = self.reader.read_line(&mut answer).map_err(|e| self.io(e))?;
        if n == 0 {
            return Err(ClientError::Closed {
                path: self.path.clone(),
            });
        }
        Ok(answer)
    }

    /// Sends a request; the `ok` payload, or the daemon's error.
    pub fn request(&mut self, req: &Request) -> Result<serde_json::Value, ClientError> {
        let answer = self.send_line(&req.to_line())?;
        match serde_json::from_str::<Response>(answer.trim_end()) {
            Ok(Response::Ok(v)) => Ok(v),
            Ok(Response::Error(e)) => Err(ClientError::Daemon(e)),
            Err(e) => Err(ClientError::Protocol(format!("{e}: {}", answer.trim_end()))),
        }
    }

    /// Sends a request and decodes its payload.
    pub fn call<T: DeserializeOwned>(&mut self, req: &Request) -> Result<T, ClientError> {
        let v = self.request(req)?;
        serde_json::from_value(v).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// After a `record` request's `ok`: the stream of trace text.
    pub fn into_reader(self) -> BufReader<UnixStream> {
        self.reader
    }
}
