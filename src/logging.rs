//! Log output that suits where it goes: colour only on a terminal; under systemd's journal
//! (stderr is the stream `JOURNAL_STREAM` names) no timestamp, no colour, and a syslog priority
//! prefix on each line, which journald turns into the entry's priority (sd-daemon(3), "<3>" for
//! errors); JSON lines for log shippers.

use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::sync::OnceLock;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// `journald` when stderr is the journal's stream, else `text`.
    #[default]
    Auto,
    /// Timestamped lines, coloured only on a terminal.
    Text,
    /// Lines with a syslog priority prefix and no timestamp (the journal keeps its own).
    Journald,
    /// One JSON object per line.
    Json,
}

/// The log filter when `--log` is not given: `PGHOTD_LOG`, then `RUST_LOG`, then `info`.
pub fn default_filter() -> String {
    ["PGHOTD_LOG", "RUST_LOG"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "info".to_string())
}

/// Whether `journal_stream` (the value of `JOURNAL_STREAM`, "DEV:INODE") names the file stderr
/// is: systemd.exec(5) sets it for services whose stderr goes to the journal, and a child whose
/// stderr was redirected elsewhere inherits the variable, so the device and inode must match.
pub fn stderr_is_journal(journal_stream: Option<&str>) -> bool {
    let Some((dev, ino)) = journal_stream.and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    match nix::sys::stat::fstat(std::io::stderr().as_fd()) {
        Ok(st) => st.st_dev == dev && st.st_ino == ino,
        Err(_) => false,
    }
}

/// The syslog priority of a level (sd-daemon(3): LOG_ERR 3, LOG_WARNING 4, LOG_INFO 6,
/// LOG_DEBUG 7).
pub fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// Prefixes each event with its priority, then writes it as `inner` does.
pub struct Journald<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for Journald<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        write!(writer, "<{}>", priority(event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// The format [`init`] chose (`auto` resolved), for [`fatal`].
static CHOSEN: OnceLock<LogFormat> = OnceLock::new();

/// The format log lines are written in: `text` until [`init`] ran.
pub fn chosen() -> LogFormat {
    CHOSEN.get().copied().unwrap_or(LogFormat::Text)
}

/// Writes why pghotd stops, in the form stderr's reader takes: `pghotd: MESSAGE` as text (what
/// scripts and a terminal read), with LOG_ERR's `<3>` under the journal (journald would file an
/// unprefixed line at the unit's default priority, info), and as one JSON object for a log
/// shipper (a bare line would break its parsing). Written whatever the log filter says.
pub fn fatal(message: &dyn std::fmt::Display) {
    match chosen() {
        LogFormat::Journald => eprintln!("<{}>pghotd: {message}", priority(&Level::ERROR)),
        LogFormat::Json => eprintln!(
            "{}",
            serde_json::json!({
                "level": "ERROR",
                "fields": { "message": message.to_string() },
                "target": "pghotd",
            })
        ),
        LogFormat::Auto | LogFormat::Text => eprintln!("pghotd: {message}"),
    }
}

/// Installs the global subscriber. `filter` is a tracing directive (`info`, `pghotd=debug`).
pub fn init(filter: &str, format: LogFormat) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| e.to_string())?;
    let format = match format {
        LogFormat::Auto if stderr_is_journal(std::env::var("JOURNAL_STREAM").ok().as_deref()) => {
            LogFormat::Journald
        }
        LogFormat::Auto => LogFormat::Text,
        other => other,
    };
    let _ = CHOSEN.set(format);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_thread_names(true);
    let result = match format {
        LogFormat::Journald => builder
            .with_ansi(false)
            .event_format(Journald(
                tracing_subscriber::fmt::format()
                    .without_time()
                    .with_level(false)
                    .with_thread_names(true),
            ))
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
        _ => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
    result.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_are_syslogs() {
        // sd-daemon(3) / syslog(3): LOG_ERR 3, LOG_WARNING 4, LOG_INFO 6, LOG_DEBUG 7.
        assert_eq!(priority(&Level::ERROR), 3);
        assert_eq!(priority(&Level::WARN), 4);
        assert_eq!(priority(&Level::INFO), 6);
        assert_eq!(priority(&Level::DEBUG), 7);
        assert_eq!(priority(&Level::TRACE), 7);
    }

    #[test]
    fn a_journal_stream_must_name_stderr_itself() {
        assert!(!stderr_is_journal(None));
        assert!(!stderr_is_journal(Some("garbage")));
        assert!(!stderr_is_journal(Some("1:x")));
        let st = nix::sys::stat::fstat(std::io::stderr().as_fd()).unwrap();
        let mine = format!("{}:{}", st.st_dev, st.st_ino);
        assert!(stderr_is_journal(Some(&mine)));
        let other = format!("{}:{}", st.st_dev, st.st_ino.wrapping_add(1));
        assert!(!stderr_is_journal(Some(&other)));
    }
}
