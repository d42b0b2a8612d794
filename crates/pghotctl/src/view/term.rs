//! The real terminal: raw mode, the alternate screen, keys, one refresh a second.
//!
//! pghotctl installs no log writer while this runs, so nothing is written over the view; a
//! daemon that goes away shows as a message and the view keeps retrying.

use std::io;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use super::{App, Mode, render};
use pghot_protocol::Snapshot;

/// What the view needs from the daemon.
pub trait Daemon {
    fn snapshot(&mut self, ranges_of: Option<u32>) -> Result<Snapshot, String>;
    fn set_paused(&mut self, paused: bool) -> Result<bool, String>;
}

/// How long an answer (e.g. to `p`) stays in the key line.
const MESSAGE_FOR: Duration = Duration::from_secs(3);

/// Runs the view until `q`, Ctrl-C or an I/O error of the terminal.
pub fn run(daemon: &mut dyn Daemon, refresh: Duration) -> io::Result<()> {
    let mut terminal = ratatui::try_init()?;
    let result = event_loop(&mut terminal, daemon, refresh);
    ratatui::try_restore()?;
    result
}

fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    daemon: &mut dyn Daemon,
    refresh: Duration,
) -> io::Result<()> {
    let mut app = App::default();
    let mut next = Instant::now();
    let mut message_at = Instant::now();
    loop {
        let now = Instant::now();
        if now >= next {
            let ranges_of = match app.mode {
                Mode::Ranges(pid) => Some(pid),
                Mode::Processes => None,
            };
            match daemon.snapshot(ranges_of) {
                Ok(s) => app.update(s),
                Err(e) => app.error = Some(format!("{e} (retrying)")),
            }
            next = now + refresh;
            if app.message.is_some() && now.duration_since(message_at) > MESSAGE_FOR {
                app.message = None;
            }
        }
        terminal.draw(|f| render(f, &app))?;
        if !event::poll(next.saturating_duration_since(Instant::now()))? {
            continue;
        }
        let Event::Key(key) = event::read()? else {
            // A resize redraws on the next pass.
            continue;
        };
        if key.kind != KeyEventKind::Press {
            continue;
        }
        if app.confirm_pause {
            app.confirm_pause = false;
            app.message = Some(if key.code == KeyCode::Char('y') {
                next = Instant::now();
                match daemon.set_paused(true) {
                    Ok(true) => "promotion paused (p resumes)".to_string(),
                    Ok(false) => "promotion still running".to_string(),
                    Err(e) => e,
                }
            } else {
                "promotion not paused".to_string()
            });
            message_at = Instant::now();
            continue;
        }
        match key.code {
            KeyCode::Char('q') => return Ok(()),
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => return Ok(()),
            KeyCode::Char('s') => {
                app.sort = app.sort.next();
                app.selected = 0;
            }
            // Pausing stops every promotion: ask first. Resuming only undoes that.
            KeyCode::Char('p') if !app.current.as_ref().is_some_and(|s| s.paused) => {
                app.confirm_pause = true;
            }
            KeyCode::Char('p') => {
                app.message = Some(match daemon.set_paused(false) {
                    Ok(true) => "promotion still paused".to_string(),
                    Ok(false) => "promotion resumed".to_string(),
                    Err(e) => e,
                });
                message_at = Instant::now();
                next = Instant::now();
            }
            KeyCode::Char('?') => app.help = !app.help,
            KeyCode::Up | KeyCode::Char('k') => app.selected = app.selected.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => {
                let rows = app.current.as_ref().map_or(0, |s| s.pids.len());
                app.selected = (app.selected + 1).min(rows.saturating_sub(1));
            }
            KeyCode::Enter => {
                if let (Mode::Processes, Some(pid)) = (app.mode, app.selected_pid()) {
                    app.mode = Mode::Ranges(pid);
                    next = Instant::now();
                }
            }
            KeyCode::Esc | KeyCode::Backspace | KeyCode::Left => {
                app.help = false;
                app.mode = Mode::Processes;
            }
            _ => {}
        }
    }
}
