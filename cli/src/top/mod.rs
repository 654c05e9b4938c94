//! `tvmq top`: a live view of every queue of the directory, read from
//! shared memory (no server), refreshed every interval: a table sorted and
//! filtered at will, one queue's detail with sparklines. `q` or Ctrl-C
//! leaves the terminal as it was (also when the view fails or panics).

mod model;
mod view;

use clap::Args;
use model::Model;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};
use tvm::Error;
use tvm::error::{CONDIT_IS_NIL, SVR_EXCEPTION};

#[derive(Args, Debug)]
pub struct TopArgs {
    /// Seconds between two readings of the queues (0.1 to 3600)
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    interval: f64,
}

/// Runs the view until `q` or Ctrl-C.
pub fn run(dir: &Path, args: &TopArgs) -> Result<(), Error> {
    if !(0.1..=3600.0).contains(&args.interval) {
        return Err(Error::new(CONDIT_IS_NIL, format!("--interval {}: 0.1 to 3600 seconds", args.interval)));
    }
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(Error::new(
            CONDIT_IS_NIL,
            "tvmq top needs a terminal; for a script: tvmq list --json, tvmq stat ID --json or tvmq metrics",
        ));
    }
    let mut model = Model::new(dir, Duration::from_secs_f64(args.interval));
    model.refresh();
    let failed = |e: std::io::Error| Error::new(SVR_EXCEPTION, format!("terminal: {e}"));
    // Raw mode and the alternate screen; ratatui's panic hook restores both.
    let mut terminal = ratatui::try_init().map_err(failed)?;
    let outcome = event_loop(&mut terminal, &mut model);
    drop(terminal);
    ratatui::restore();
    let _ = ratatui::crossterm::execute!(std::io::stdout(), ratatui::crossterm::cursor::Show);
    outcome.map_err(failed)
}

/// What a key does.
enum Action {
    Quit,
    Redraw,
    Nothing,
}

fn on_key(m: &mut Model, code: KeyCode, mods: KeyModifiers, page: usize) -> Action {
    if code == KeyCode::Char('c') && mods.contains(KeyModifiers::CONTROL) {
        return Action::Quit;
    }
    if m.editing_filter {
        match code {
            KeyCode::Enter | KeyCode::Esc => m.editing_filter = false,
            KeyCode::Backspace => {
                m.filter.pop();
            }
            KeyCode::Char(c) if !c.is_control() && m.filter.len() < 64 => m.filter.push(c),
            _ => return Action::Nothing,
        }
        m.reorder();
        return Action::Redraw;
    }
    if m.detail.is_some() {
        return match code {
            KeyCode::Char('q') => Action::Quit,
            KeyCode::Esc | KeyCode::Enter | KeyCode::Backspace | KeyCode::Left => {
                m.detail = None;
                Action::Redraw
            }
            _ => Action::Nothing,
        };
    }
    match code {
        KeyCode::Char('q') => return Action::Quit,
        KeyCode::Up | KeyCode::Char('k') => m.step(-1),
        KeyCode::Down | KeyCode::Char('j') => m.step(1),
        KeyCode::PageUp => m.step(-(page as isize)),
        KeyCode::PageDown | KeyCode::Char(' ') => m.step(page as isize),
        KeyCode::Home | KeyCode::Char('g') => m.step(isize::MIN / 2),
        KeyCode::End | KeyCode::Char('G') => m.step(isize::MAX / 2),
        KeyCode::Char('s') => m.next_sort(),
        KeyCode::Char('r') => m.reverse(),
        KeyCode::Char('/') => m.editing_filter = true,
        KeyCode::Esc if !m.filter.is_empty() => {
            m.filter.clear();
            m.reorder();
        }
        KeyCode::Enter | KeyCode::Right => m.detail = m.selected_id(),
        _ => return Action::Nothing,
    }
    Action::Redraw
}

fn event_loop(terminal: &mut ratatui::DefaultTerminal, m: &mut Model) -> std::io::Result<()> {
    let mut next = Instant::now() + m.interval;
    loop {
        let mut page = 10;
        terminal.draw(|f| {
            page = f.area().height.saturating_sub(5).max(1) as usize;
            view::draw(f, m)
        })?;
        loop {
            let wait = next.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                m.refresh();
                next = Instant::now() + m.interval;
                break;
            }
            if event::poll(wait)? {
                match event::read()? {
                    Event::Key(k) if k.kind != KeyEventKind::Release => match on_key(m, k.code, k.modifiers, page) {
                        Action::Quit => return Ok(()),
                        Action::Redraw => break,
                        Action::Nothing => {}
                    },
                    Event::Resize(..) => break,
                    _ => {}
                }
            }
        }
    }
}
