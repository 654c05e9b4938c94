//! How `tvmq top` draws its model: a title and totals, the table of queues
//! (only the rows on screen are made: ten thousand queues cost what a
//! screenful does), the keys; or one queue's detail with sparklines of its
//! depth and rates.

use super::model::{HISTORY, Model};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Sparkline, Table, TableState};
use tvmq_watch::{QueueSample, Rates};

/// A count for a narrow column: 12345 -> "12.3k".
pub fn short(n: f64) -> String {
    let a = n.abs();
    if a >= 1e9 {
        format!("{:.1}G", n / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", n / 1e3)
    } else if n.fract() == 0.0 || a >= 100.0 {
        format!("{n:.0}")
    } else {
        format!("{n:.1}")
    }
}

fn rate(r: Option<&Rates>, pick: fn(&Rates) -> f64) -> String {
    r.map_or("-".into(), |r| short(pick(r)))
}

/// `####......` for depth / capacity.
fn bar(depth: u64, capacity: u64, width: usize) -> String {
    let filled = if capacity == 0 { 0 } else { ((depth as f64 / capacity as f64) * width as f64).ceil() as usize };
    let filled = filled.min(width);
    format!("{}{}", "#".repeat(filled), ".".repeat(width - filled))
}

/// How long ago `ns` (since the epoch) was, from `now_ns`.
fn ago(ns: u64, now_ns: u64) -> String {
    if ns == 0 {
        return "never".into();
    }
    let s = now_ns.saturating_sub(ns) / 1_000_000_000;
    if s < 120 { format!("{s}s ago") } else { format!("{}m ago", s / 60) }
}

pub fn draw(f: &mut Frame, m: &mut Model) {
    let [title, totals, body, keys] =
        Layout::vertical([Constraint::Length(1), Constraint::Length(1), Constraint::Min(3), Constraint::Length(1)])
            .areas(f.area());
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let (n, took, unreadable) =
        m.sample.as_ref().map_or((0, 0.0, 0), |s| (s.queues.len(), s.took.as_secs_f64() * 1e3, s.unreadable));
    let mut head = vec![Span::styled("tvmq top", bold), Span::raw(format!("  {}  {n} queues", m.dir().display()))];
    if m.order.len() != n {
        head.push(Span::raw(format!(" ({} shown)", m.order.len())));
    }
    if unreadable > 0 {
        let why =
            m.sample.as_ref().and_then(|s| s.unreadable_why.as_deref()).map_or(String::new(), |w| format!(" ({w})"));
        head.push(Span::raw(format!(", {unreadable} unreadable{why}")));
    }
    if let Some(s) = m.sample.as_ref().filter(|s| s.transient > 0) {
        // Beyond the views kept (a quarter of vm.max_map_count): slower.
        head.push(Span::raw(format!(", {} reopened each time", s.transient)));
    }
    head.push(Span::raw(format!(
        "  read in {took:.1} ms, every {:.1} s  sort: {} {}",
        m.interval.as_secs_f64(),
        m.sort_name(),
        if m.descending { "v" } else { "^" }
    )));
    if !m.filter.is_empty() || m.editing_filter {
        head.push(Span::styled(
            format!("  filter: {}{}", m.filter, if m.editing_filter { "_" } else { "" }),
            Style::default().fg(Color::Yellow),
        ));
    }
    f.render_widget(Paragraph::new(Line::from(head)), title);
    let line = match (&m.error, &m.sample) {
        (Some(e), _) => Line::styled(format!("error: {e}"), Style::default().fg(Color::Red)),
        (None, Some(s)) => {
            let sum = |g: fn(&QueueSample) -> u64| s.queues.iter().map(g).sum::<u64>();
            let rsum = |g: fn(&Rates) -> f64| m.rates.iter().flatten().map(g).sum::<f64>();
            Line::raw(format!(
                "records queued {}  push/s {}  pop/s {}  waiters {}  leases in flight {}  dead-lettered {}",
                sum(|q| q.snap.depth),
                short(rsum(|r| r.push)),
                short(rsum(|r| r.pop)),
                sum(|q| q.snap.waiters),
                sum(|q| q.snap.leases_in_flight),
                sum(|q| q.snap.dead_lettered)
            ))
        }
        (None, None) => Line::raw("reading the queues..."),
    };
    f.render_widget(Paragraph::new(line), totals);
    match m.detail {
        Some(id) => detail(f, m, id, body),
        None => table(f, m, body),
    }
    let help = if m.editing_filter {
        "type the filter (id or name)  Enter/Esc: done  Backspace: erase"
    } else if m.detail.is_some() {
        "Esc/Enter/Backspace: back  q: quit"
    } else {
        "q: quit  Up/Down PgUp/PgDn Home/End: move  Enter: detail  s: sort  r: reverse  /: filter"
    };
    f.render_widget(Paragraph::new(Line::styled(help, Style::default().fg(Color::DarkGray))), keys);
}

fn table(f: &mut Frame, m: &mut Model, area: Rect) {
    let rows_on_screen = area.height.saturating_sub(1) as usize;
    m.scroll_to_selection(rows_on_screen);
    let Some(s) = &m.sample else { return };
    let now = s.wall_ns;
    let rows: Vec<Row> = m
        .order
        .iter()
        .skip(m.offset)
        .take(rows_on_screen)
        .map(|&i| {
            let q = &s.queues[i];
            let r = m.rates[i].as_ref();
            let sn = &q.snap;
            let leases = |v: String| if sn.leases { v } else { "-".into() };
            // A lease table not read yet (the tables read per refresh are bounded).
            let in_flight = if q.leases_read.is_some() { short(sn.leases_in_flight as f64) } else { "?".into() };
            Row::new(vec![
                Cell::from(q.id.to_string()),
                Cell::from(q.name.to_string()),
                Cell::from(format!(
                    "{} {:>6}/{:<6}",
                    bar(sn.depth, sn.capacity, 10),
                    short(sn.depth as f64),
                    short(sn.capacity as f64)
                )),
                Cell::from(rate(r, |r| r.push)),
                Cell::from(rate(r, |r| r.pop)),
                Cell::from(sn.waiters.to_string()),
                Cell::from(sn.processes.to_string()),
                Cell::from(leases(in_flight)),
                Cell::from(leases(rate(r, |r| r.redelivered))),
                Cell::from(leases(short(sn.dead_lettered as f64))),
                Cell::from(sn.durable.map_or("-".into(), |_| ago(sn.last_sync_ns, now))),
            ])
        })
        .collect();
    let header = Row::new([
        "ID",
        "NAME",
        "DEPTH / CAPACITY",
        "PUSH/S",
        "POP/S",
        "WAIT",
        "PROC",
        "LEASES",
        "REDLV/S",
        "DEAD",
        "SYNCED",
    ])
    .style(Style::default().add_modifier(Modifier::BOLD).bg(Color::DarkGray));
    let widths = [
        Constraint::Length(10),
        Constraint::Min(12),
        Constraint::Length(25),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(5),
        Constraint::Length(5),
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(9),
    ];
    let t =
        Table::new(rows, widths).header(header).row_highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    let mut state = TableState::default().with_selected(Some(m.selected.saturating_sub(m.offset)));
    f.render_stateful_widget(t, area, &mut state);
}

fn detail(f: &mut Frame, m: &Model, id: u32, area: Rect) {
    let Some(s) = &m.sample else { return };
    let block = Block::default().borders(Borders::ALL).title(format!(" queue {id} "));
    let Some(i) = s.queues.iter().position(|q| q.id == id) else {
        f.render_widget(Paragraph::new("this queue is gone (dropped)").block(block), area);
        return;
    };
    let q = &s.queues[i];
    let sn = &q.snap;
    let r = m.rates[i].as_ref();
    let inner = block.inner(area);
    f.render_widget(block, area);
    let [text, depth, push, pop] =
        Layout::vertical([Constraint::Length(8), Constraint::Min(3), Constraint::Min(3), Constraint::Min(3)])
            .areas(inner);
    let mut lines = vec![
        Line::raw(format!("name {}   record size {} bytes   capacity {}", q.name, sn.record_size, sn.capacity)),
        Line::raw(format!(
            "depth {} ({:.1} % full)   pushed {}   popped {}",
            sn.depth,
            100.0 * sn.depth as f64 / sn.capacity.max(1) as f64,
            sn.pushed,
            sn.popped
        )),
        Line::raw(format!("push/s {}   pop/s {}", rate(r, |r| r.push), rate(r, |r| r.pop))),
        Line::raw(format!("waiters {}   processes attached {}", sn.waiters, sn.processes)),
    ];
    if sn.leases {
        // Read at every refresh unless the lease tables are too large in all.
        let gauges = match q.leases_read {
            None => "leases in flight ?   waiting ? (not read yet)".to_string(),
            Some(t) => {
                let age = s.at.saturating_duration_since(t).as_secs_f64();
                let when = if age >= 0.5 { format!(" (read {age:.0} s ago)") } else { String::new() };
                format!("leases in flight {}   waiting {}{when}", sn.leases_in_flight, sn.leases_waiting)
            }
        };
        lines.push(Line::raw(format!(
            "{gauges}   redelivered {} ({}/s)   expired {}   dead-lettered {}",
            sn.redelivered,
            rate(r, |r| r.redelivered),
            sn.expired,
            sn.dead_lettered
        )));
    }
    if let Some(d) = sn.durable {
        lines.push(Line::raw(format!(
            "durable {d}   syncs {}   last sync {}",
            sn.syncs,
            ago(sn.last_sync_ns, s.wall_ns)
        )));
    }
    f.render_widget(Paragraph::new(lines), text);
    let h = m.history.get(&id);
    let series =
        |pick: fn(&super::model::Point) -> u64| -> Vec<u64> { h.map_or(Vec::new(), |h| h.iter().map(pick).collect()) };
    let last = |v: &[u64]| v.last().copied().unwrap_or(0);
    let spark = |title: String, data: &[u64], color: Color, area: Rect, f: &mut Frame| {
        let w = area.width as usize;
        let data = &data[data.len().saturating_sub(w)..];
        f.render_widget(
            Sparkline::default().block(Block::default().title(title)).data(data).style(Style::default().fg(color)),
            area,
        );
    };
    let d = series(|p| p.depth);
    let pu = series(|p| p.push.round() as u64);
    let po = series(|p| p.pop.round() as u64);
    let n = d.len().min(HISTORY);
    spark(format!("depth, last {n} samples (now {})", last(&d)), &d, Color::Cyan, depth, f);
    spark(format!("push/s (now {})", last(&pu)), &pu, Color::Green, push, f);
    spark(format!("pop/s (now {})", last(&po)), &po, Color::Magenta, pop, f);
}
