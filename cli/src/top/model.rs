//! What `tvmq top` shows, apart from how: the latest sample of every queue
//! with its rates, the order and filter, the selection, the queue in
//! detail, and a short history of each queue for the sparklines.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::time::Duration;
use tvmq_watch::api::SortKey;
use tvmq_watch::{Collector, Rates, Sample, Window};

/// Samples kept per queue for the detail's sparklines.
pub const HISTORY: usize = 240;

/// One queue at one sample, for the sparklines.
#[derive(Clone, Copy, Default)]
pub struct Point {
    pub depth: u64,
    pub push: f64,
    pub pop: f64,
}

/// The sort keys in the order `s` steps through them.
pub const SORTS: [(SortKey, &str); 10] = [
    (SortKey::Depth, "depth"),
    (SortKey::Fill, "fill"),
    (SortKey::PushRate, "push/s"),
    (SortKey::PopRate, "pop/s"),
    (SortKey::Waiters, "waiters"),
    (SortKey::Processes, "processes"),
    (SortKey::Leases, "leases"),
    (SortKey::DeadLettered, "dead-lettered"),
    (SortKey::Id, "id"),
    (SortKey::Name, "name"),
];

pub struct Model {
    collector: Collector,
    window: Window,
    /// The latest sample, and its queues' rates (in its order).
    pub sample: Option<Sample>,
    pub rates: Vec<Option<Rates>>,
    /// The queues shown, as indices into the sample, in display order.
    pub order: Vec<usize>,
    /// Index into SORTS.
    pub sort: usize,
    pub descending: bool,
    pub filter: String,
    pub editing_filter: bool,
    /// The selected row (index into `order`) and the first row on screen.
    pub selected: usize,
    pub offset: usize,
    /// The queue selected, kept across samples (its row moves as it sorts).
    selected_id: Option<u32>,
    /// The queue whose detail is shown.
    pub detail: Option<u32>,
    pub history: HashMap<u32, VecDeque<Point>>,
    /// Why the last sample failed.
    pub error: Option<String>,
    pub interval: Duration,
}

impl Model {
    pub fn new(dir: &Path, interval: Duration) -> Model {
        Model {
            collector: Collector::new(dir),
            // Rates over the last second (or the refresh interval, when longer).
            window: Window::new(Duration::from_secs(1)),
            sample: None,
            rates: Vec::new(),
            order: Vec::new(),
            sort: 0,
            descending: true,
            filter: String::new(),
            editing_filter: false,
            selected: 0,
            offset: 0,
            selected_id: None,
            detail: None,
            history: HashMap::new(),
            error: None,
            interval,
        }
    }

    pub fn dir(&self) -> &Path {
        self.collector.dir()
    }

    pub fn sort_name(&self) -> &'static str {
        SORTS[self.sort].1
    }

    /// Reads every queue again and updates rates, history and order.
    pub fn refresh(&mut self) {
        match self.collector.sample() {
            Ok(s) => {
                let (rates, _) = self.window.rates(&s);
                self.window.add(&s);
                for (q, r) in s.queues.iter().zip(&rates) {
                    let h = self.history.entry(q.id).or_default();
                    if h.len() == HISTORY {
                        h.pop_front();
                    }
                    let r = r.unwrap_or_default();
                    h.push_back(Point { depth: q.snap.depth, push: r.push, pop: r.pop });
                }
                if self.history.len() > s.queues.len() {
                    self.history.retain(|id, _| s.get(*id).is_some());
                }
                self.sample = Some(s);
                self.rates = rates;
                self.error = None;
            }
            Err(e) => self.error = Some(e.to_string()),
        }
        self.reorder();
    }

    /// Sorts and filters the latest sample, keeping the selected queue selected.
    pub fn reorder(&mut self) {
        let Some(s) = &self.sample else { return };
        let filter = self.filter.to_lowercase();
        let mut order: Vec<usize> = (0..s.queues.len())
            .filter(|&i| {
                let q = &s.queues[i];
                filter.is_empty() || q.id.to_string().contains(&filter) || q.name.to_lowercase().contains(&filter)
            })
            .collect();
        let key = SORTS[self.sort].0;
        let rates = &self.rates;
        order.sort_by(|&a, &b| {
            let o = key.compare((&s.queues[a], rates[a].as_ref()), (&s.queues[b], rates[b].as_ref()));
            if self.descending { o.reverse() } else { o }
        });
        self.order = order;
        if let Some(id) = self.selected_id {
            if let Some(row) = self.order.iter().position(|&i| s.queues[i].id == id) {
                self.selected = row;
            }
        }
        self.selected = self.selected.min(self.order.len().saturating_sub(1));
        self.note_selection();
    }

    fn note_selection(&mut self) {
        self.selected_id = self.sample.as_ref().and_then(|s| self.order.get(self.selected).map(|&i| s.queues[i].id));
    }

    /// Moves the selection by `by` rows (clamped).
    pub fn step(&mut self, by: isize) {
        let last = self.order.len().saturating_sub(1) as isize;
        self.selected = (self.selected as isize + by).clamp(0, last.max(0)) as usize;
        self.note_selection();
    }

    /// Keeps the selected row among the `rows` on screen.
    pub fn scroll_to_selection(&mut self, rows: usize) {
        let rows = rows.max(1);
        if self.selected < self.offset {
            self.offset = self.selected;
        } else if self.selected >= self.offset + rows {
            self.offset = self.selected + 1 - rows;
        }
        self.offset = self.offset.min(self.order.len().saturating_sub(rows));
    }

    /// Steps to the next sort key (amounts largest first, names and ids ascending).
    pub fn next_sort(&mut self) {
        self.sort = (self.sort + 1) % SORTS.len();
        self.descending = !matches!(SORTS[self.sort].0, SortKey::Id | SortKey::Name);
        self.reorder();
    }

    pub fn reverse(&mut self) {
        self.descending = !self.descending;
        self.reorder();
    }

    /// The id of the selected queue.
    pub fn selected_id(&self) -> Option<u32> {
        self.selected_id
    }
}
