//! `pghotctl top`: a live terminal view of the daemon, refreshed every second.
//!
//! Shape (below's model -> view split): the daemon sends a [`Snapshot`] (the same type `stats
//! --json` and the metrics are made from, so names match); [`App`] keeps the last two and
//! derives rates from them (counters only grow; the reader computes deltas); [`render`] draws an
//! `App` into any ratatui backend, so the tests draw into a `TestBackend` and compare text.
//! [`term`] owns the real terminal and the key loop; [`text_frame`] draws one frame as text
//! (`top --once`).
//!
//! ```text
//! pghotd up 1m05s  trace:/run/pghot.fifo                         PROMOTING  dry-run
//! samples 12.3k/s  dropped 0.1%  promote 1.2 of 65536 MB/s  tracked 12.0k of 1.0M
//! node0 top   [########----------]  45% used of 1006M
//! node2 lower [##----------------]  10% used of 1006M  queue 0
//! ┌ processes by samples/s ──────────────────────────────────────────────────┐
//! │    pid comm             samples/s hot_pages  hot_slow promoted_MB   fail │
//! ```

pub mod term;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Row, Table};

use pghot_protocol::{PidRow, Snapshot};

/// Smallest terminal the view draws into; below it, a one-line message.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 10;

/// Columns the process table can be sorted by (`s` cycles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    SamplesPerSec,
    Hot,
    HotSlow,
    Promoted,
    Fail,
    Pid,
}

impl SortKey {
    pub fn next(self) -> SortKey {
        use SortKey::*;
        match self {
            SamplesPerSec => Hot,
            Hot => HotSlow,
            HotSlow => Promoted,
            Promoted => Fail,
            Fail => Pid,
            Pid => SamplesPerSec,
        }
    }

    /// The column header it sorts by.
    pub fn column(self) -> &'static str {
        match self {
            SortKey::SamplesPerSec => "samples/s",
            SortKey::Hot => "hot",
            SortKey::HotSlow => "hot_slow",
            SortKey::Promoted => "promoted_MB",
            SortKey::Fail => "fail",
            SortKey::Pid => "pid",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Processes,
    /// The hottest ranges of one process.
    Ranges(u32),
}

/// What the view shows: the last two snapshots and the operator's choices.
#[derive(Debug, Clone)]
pub struct App {
    pub current: Option<Snapshot>,
    pub previous: Option<Snapshot>,
    pub sort: SortKey,
    pub selected: usize,
    pub mode: Mode,
    pub help: bool,
    /// Shown in the key line (e.g. the answer to `p`).
    pub message: Option<String>,
    /// Set while the daemon cannot be reached; the last data stays on screen, marked stale.
    pub error: Option<String>,
    /// `p` was pressed while promoting: the key line asks, and only `y` pauses.
    pub confirm_pause: bool,
}

impl Default for App {
    fn default() -> Self {
        App {
            current: None,
            previous: None,
            sort: SortKey::SamplesPerSec,
            selected: 0,
            mode: Mode::Processes,
            help: false,
            message: None,
            error: None,
            confirm_pause: false,
        }
    }
}

/// Rates between two snapshots.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    pub samples_per_s: f64,
    /// Share of samples dropped, 0..=1.
    pub dropped: f64,
    pub promoted_mb_per_s: f64,
    elapsed_s: f64,
}

fn promoted_bytes(s: &Snapshot) -> u64 {
    s.counters
        .iter()
        .filter(|(k, _)| k.starts_with("pgpromote_bytes_node"))
        .map(|(_, v)| v)
        .sum()
}

impl Rates {
    pub fn between(prev: Option<&Snapshot>, cur: &Snapshot) -> Rates {
        let Some(prev) = prev else {
            return Rates::default();
        };
        let dt = cur.uptime_s - prev.uptime_s;
        if dt <= 0.0 {
            return Rates::default();
        }
        let delta = |name: &str| cur.counter(name).saturating_sub(prev.counter(name)) as f64;
        let total = delta("hwhint_total_events");
        Rates {
            samples_per_s: total / dt,
            dropped: if total > 0.0 {
                delta("hwhint_dropped_events") / total
            } else {
                0.0
            },
            promoted_mb_per_s: promoted_bytes(cur).saturating_sub(promoted_bytes(prev)) as f64
                / dt
                / f64::from(1 << 20),
            elapsed_s: dt,
        }
    }

    fn pid_samples_per_s(&self, prev: Option<&Snapshot>, row: &PidRow) -> f64 {
        let before = prev
            .and_then(|p| p.pids.iter().find(|r| r.pid == row.pid))
            .map_or(0, |r| r.counts.samples);
        if self.elapsed_s > 0.0 {
            row.counts.samples.saturating_sub(before) as f64 / self.elapsed_s
        } else {
            0.0
        }
    }
}

/// 1234 -> "1.2k"; up to G.
pub fn human(n: f64) -> String {
    let (v, unit) = if n >= 1e9 {
        (n / 1e9, "G")
    } else if n >= 1e6 {
        (n / 1e6, "M")
    } else if n >= 1e3 {
        (n / 1e3, "k")
    } else {
        return format!("{n:.0}");
    };
    format!("{v:.1}{unit}")
}

fn duration(s: f64) -> String {
    let s = s as u64;
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

/// `[####------]` of `width` cells.
fn bar(frac: f64, width: usize) -> String {
    let full = ((frac.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    format!("[{}{}]", "#".repeat(full), "-".repeat(width - full))
}

impl App {
    pub fn update(&mut self, snap: Snapshot) {
        self.previous = self.current.take();
        self.current = Some(snap);
        self.error = None;
        let rows = self.current.as_ref().map_or(0, |s| s.pids.len());
        self.selected = self.selected.min(rows.saturating_sub(1));
    }

    pub fn rates(&self) -> Rates {
        match &self.current {
            Some(cur) => Rates::between(self.previous.as_ref(), cur),
            None => Rates::default(),
        }
    }

    /// Process rows in the chosen order, each with its samples/s.
    pub fn sorted_pids(&self) -> Vec<(&PidRow, f64)> {
        let Some(cur) = &self.current else {
            return Vec::new();
        };
        let rates = self.rates();
        let mut rows: Vec<(&PidRow, f64)> = cur
            .pids
            .iter()
            .map(|r| (r, rates.pid_samples_per_s(self.previous.as_ref(), r)))
            .collect();
        let key = |r: &(&PidRow, f64)| -> f64 {
            match self.sort {
                SortKey::SamplesPerSec => r.1,
                SortKey::Hot => r.0.hot as f64,
                SortKey::HotSlow => r.0.hot_slow as f64,
                SortKey::Promoted => r.0.counts.promoted_bytes as f64,
                SortKey::Fail => r.0.counts.fail as f64,
                SortKey::Pid => -f64::from(r.0.pid),
            }
        };
        rows.sort_by(|a, b| key(b).total_cmp(&key(a)).then(a.0.pid.cmp(&b.0.pid)));
        rows
    }

    /// The pid under the cursor.
    pub fn selected_pid(&self) -> Option<u32> {
        self.sorted_pids().get(self.selected).map(|r| r.0.pid)
    }
}

/// The key line while `p` waits for an answer.
pub const CONFIRM_PAUSE: &str = "pause promotion? y pauses, any other key keeps promoting";

/// `app` drawn into an off-screen `width` x `height` buffer, one text line per row with the
/// trailing blanks trimmed.
pub fn draw_text(app: &App, width: u16, height: u16) -> String {
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, height))
        .expect("an in-memory backend does not fail");
    terminal
        .draw(|f| render(f, app))
        .expect("an in-memory backend does not fail");
    let buf = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..height {
        let line: String = (0..width).map(|x| buf[(x, y)].symbol()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `pghotctl top --once`: the frame the live view would show after `previous` then `current`
/// (rates between them), the ranges of `ranges_of` if given; the key line says what it is.
pub fn text_frame(
    previous: Snapshot,
    current: Snapshot,
    ranges_of: Option<u32>,
    width: u16,
    height: u16,
) -> String {
    let over = current.uptime_s - previous.uptime_s;
    let mut app = App::default();
    app.update(previous);
    app.update(current);
    if let Some(pid) = ranges_of {
        app.mode = Mode::Ranges(pid);
    }
    app.message = Some(format!("pghotctl top --once: rates over {over:.1}s"));
    draw_text(&app, width, height)
}

/// Draws the whole view.
pub fn render(frame: &mut Frame, app: &App) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let text = format!(
            "terminal {}x{} is too small for pghotctl top (needs {MIN_WIDTH}x{MIN_HEIGHT}); q quits",
            area.width, area.height
        );
        frame.render_widget(
            Paragraph::new(text).wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    }
    let Some(snap) = &app.current else {
        let text = app
            .error
            .clone()
            .unwrap_or_else(|| "waiting for pghotd...".to_string());
        frame.render_widget(
            Paragraph::new(format!("{text}\n\nq quits"))
                .wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    };
    let header = header_lines(app, snap, area.width as usize);
    let [top, body, keys] = Layout::vertical([
        Constraint::Length(header.len() as u16),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(header), top);
    match app.mode {
        Mode::Processes => render_processes(frame, app, body),
        Mode::Ranges(pid) => render_ranges(frame, snap, pid, body),
    }
    let key_line = match (&app.message, app.mode) {
        _ if app.confirm_pause => CONFIRM_PAUSE.to_string(),
        (Some(m), _) => m.clone(),
        (None, Mode::Processes) => {
            "q quit  s sort  p pause/resume  ↑↓ select  enter ranges  ? help".to_string()
        }
        (None, Mode::Ranges(_)) => "q quit  esc back  p pause/resume  ? help".to_string(),
    };
    frame.render_widget(
        Paragraph::new(key_line).style(Style::new().add_modifier(Modifier::REVERSED)),
        keys,
    );
    if app.help {
        render_help(frame, area);
    }
}

fn header_lines(app: &App, snap: &Snapshot, width: usize) -> Vec<Line<'static>> {
    let rates = app.rates();
    let state = if snap.paused { "PAUSED" } else { "PROMOTING" };
    let dry = if snap.dry_run { "  dry-run" } else { "" };
    let left = format!(
        "pghotd up {}  {}",
        duration(snap.uptime_s),
        snap.sources.join(" ")
    );
    let right = format!("{state}{dry}");
    let pad = width
        .saturating_sub(left.chars().count() + right.chars().count())
        .max(1);
    let mut lines = vec![Line::from(format!("{left}{}{right}", " ".repeat(pad)))];
    lines.push(Line::from(match &app.error {
        Some(e) => format!("STALE: {e}"),
        None => format!(
            "samples {}/s  dropped {:.1}%  promote {:.1} of {} MB/s  tracked {} of {}{}",
            human(rates.samples_per_s),
            rates.dropped * 100.0,
            rates.promoted_mb_per_s,
            snap.promote_rate_limit_mbps,
            human(snap.tracked_pages as f64),
            human(snap.max_tracked_pages as f64),
            snap.heat_floor_samples
                .map_or(String::new(), |f| format!("  floor {f:.1} samples")),
        ),
    }));
    for n in &snap.nodes {
        let used = n
            .mem_free_kb
            .map(|f| 1.0 - f as f64 / n.mem_total_kb.max(1) as f64);
        let queue = n
            .queue_depth
            .map_or(String::new(), |q| format!("  queue {q}"));
        lines.push(Line::from(format!(
            "node{:<3} {:<5} {} {:>4} used of {}M{queue}",
            n.node,
            n.tier,
            bar(used.unwrap_or(0.0), 20),
            used.map_or("?".into(), |u| format!("{:.0}%", u * 100.0)),
            n.mem_total_kb / 1024,
        )));
    }
    if let Some(a) = &snap.admission {
        lines.push(Line::from(a.summary(|name| snap.counter(name))));
    }
    lines.extend(conflict_lines(snap, width));
    lines
}

/// Two lines per competing promoter, what it is and what turns it off (cut to the width), so an
/// operator watching `top` sees why promotion is fought over.
fn conflict_lines(snap: &Snapshot, width: usize) -> impl Iterator<Item = Line<'static>> + '_ {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    snap.conflicts.iter().flat_map(move |c| {
        let cut = |t: String| t.chars().take(width).collect::<String>();
        [
            Line::from(cut(format!("CONFLICT {}", c.detail))).style(bold),
            Line::from(cut(format!("  fix: {}", c.remedy))),
        ]
    })
}

const PID_COLUMNS: [&str; 7] = [
    "pid",
    "comm",
    "samples/s",
    "hot",
    "hot_slow",
    "promoted_MB",
    "fail",
];

fn render_processes(frame: &mut Frame, app: &App, area: Rect) {
    let rows = app.sorted_pids();
    let mb = |b: u64| format!("{:.1}", b as f64 / f64::from(1 << 20));
    let visible = area.height.saturating_sub(3) as usize;
    // Keep the selection on screen.
    let first = app.selected.saturating_sub(visible.saturating_sub(1));
    let table_rows: Vec<Row> = rows
        .iter()
        .enumerate()
        .skip(first)
        .map(|(i, (r, rate))| {
            let row = Row::new(vec![
                r.pid.to_string(),
                r.comm.clone(),
                human(*rate),
                r.hot.to_string(),
                r.hot_slow.to_string(),
                mb(r.counts.promoted_bytes),
                r.counts.fail.to_string(),
            ]);
            if i == app.selected {
                row.style(Style::new().add_modifier(Modifier::REVERSED))
            } else {
                row
            }
        })
        .collect();
    let omitted = app.current.as_ref().map_or(0, |s| s.pids_omitted);
    let title = if omitted > 0 {
        format!(
            " processes by {} ({omitted} more not shown) ",
            app.sort.column()
        )
    } else {
        format!(" processes by {} ", app.sort.column())
    };
    let header = Row::new(PID_COLUMNS.map(|c| {
        if c == app.sort.column() {
            format!("{c}▼")
        } else {
            c.to_string()
        }
    }))
    .style(Style::new().add_modifier(Modifier::BOLD));
    let table = Table::new(
        table_rows,
        [
            Constraint::Length(7),
            Constraint::Min(8),
            Constraint::Length(10),
            Constraint::Length(7),
            Constraint::Length(9),
            Constraint::Length(12),
            Constraint::Length(6),
        ],
    )
    .header(header)
    .block(Block::new().borders(Borders::ALL).title(title));
    frame.render_widget(table, area);
}

fn render_ranges(frame: &mut Frame, snap: &Snapshot, pid: u32, area: Rect) {
    let (comm, ranges) = match &snap.ranges {
        Some(v) if v.pid == pid => (v.comm.as_str(), v.ranges.as_slice()),
        _ => ("", &[][..]),
    };
    let rows: Vec<Row> = ranges
        .iter()
        .map(|r| {
            Row::new(vec![
                format!("{:#x}-{:#x}", r.start, r.end),
                r.pages.to_string(),
                format!("{:.1}", r.heat),
                r.node.map_or("mixed".into(), |n| n.to_string()),
                r.slow_pages.to_string(),
            ])
        })
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Min(29),
            Constraint::Length(7),
            Constraint::Length(8),
            Constraint::Length(6),
            Constraint::Length(10),
        ],
    )
    .header(
        Row::new(["range", "pages", "heat", "node", "slow_pages"])
            .style(Style::new().add_modifier(Modifier::BOLD)),
    )
    .block(
        Block::new()
            .borders(Borders::ALL)
            .title(format!(" hottest ranges of {pid} {comm} ")),
    );
    frame.render_widget(table, area);
}

fn render_help(frame: &mut Frame, area: Rect) {
    let text = [
        "q        quit",
        "s        sort by the next column",
        "p        pause promotion (asks first) or resume it",
        "↑ ↓ j k  select a process",
        "enter    hottest ranges of the selected process",
        "esc      back to the process list",
        "?        close this help",
        "",
        "samples/s: samples of the process per second",
        "hot: tracked pages with heat >= freq_threshold",
        "hot_slow: hot pages still on a lower tier",
        "promoted_MB: moved to a top tier (or would be,",
        "  in a dry run); fail: promotions that failed",
    ];
    let w = 54.min(area.width);
    let h = (text.len() as u16 + 2).min(area.height);
    let rect = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(text.join("\n")).block(Block::new().borders(Borders::ALL).title(" keys ")),
        rect,
    );
}

#[cfg(test)]
mod tests;
