//! What the HTTP server's requests share: the [`Watch`] of a directory (its
//! collector, the rates window, the latest sample and its exposition,
//! cached for a moment so that many readers cost one read of the queues),
//! and the [`Source`] of metrics beyond the queues' (the server's).

use crate::collect::{Collector, Sample};
use crate::expose;
use crate::rates::{Rates, Window};
use parking_lot::Mutex;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tvm::Error;

/// The default bound on the queues listed one by one in an exposition.
pub const DEFAULT_MAX_LISTED: usize = 10_000;

/// A sample is read again only when the last is older than this: requests
/// that come faster share it, so that no client can make the queues be
/// read more than a few times a second.
const FRESH: Duration = Duration::from_millis(250);

/// Metrics beyond the queues' (the server's clients, commands, syncs).
pub trait Source: Send + Sync {
    /// Appends its families to an exposition (text format 0.0.4).
    fn metrics(&self, out: &mut String);
    /// The `server` object of `/api/queues` (null without a source).
    fn api(&self) -> serde_json::Value;
}

/// A sample with the rates of its queues (in its order).
pub struct Latest {
    /// The sample.
    pub sample: Sample,
    /// Each queue's rates (None: no earlier sample of it yet).
    pub rates: Vec<Option<Rates>>,
    /// The time the rates are taken over (None: the first sample).
    pub rate_span: Option<Duration>,
}

/// The cached latest sample and its exposition.
struct Cache {
    latest: Option<Arc<Latest>>,
    exposition: Option<(Instant, Arc<Vec<u8>>)>,
}

/// The queues of one directory, for any number of readers.
pub struct Watch {
    collect: Mutex<(Collector, Window)>,
    cache: Mutex<Cache>,
    max_listed: usize,
    source: Option<Arc<dyn Source>>,
}

impl Watch {
    /// Watches the queues of `dir`, listing at most `max_listed` of them
    /// one by one in an exposition, with `source`'s metrics beside them.
    pub fn new(dir: &Path, max_listed: usize, source: Option<Arc<dyn Source>>) -> Watch {
        Watch {
            collect: Mutex::new((Collector::new(dir), Window::new(Duration::from_secs(1)))),
            cache: Mutex::new(Cache { latest: None, exposition: None }),
            max_listed,
            source,
        }
    }

    /// Keeps at most `n` views of queues open between readings
    /// ([`Collector::with_max_views`]; by default a quarter of the kernel's
    /// bound on a process's mappings): for a process that maps queues of
    /// its own (a server), the share of its mappings it gives the readings.
    pub fn max_views(mut self, n: usize) -> Watch {
        let (collector, _) = self.collect.get_mut();
        *collector = Collector::with_max_views(collector.dir(), n);
        self
    }

    /// The source of metrics beyond the queues', if any.
    pub fn source(&self) -> Option<&Arc<dyn Source>> {
        self.source.as_ref()
    }

    /// The queue directory.
    pub fn dir(&self) -> std::path::PathBuf {
        self.collect.lock().0.dir().to_path_buf()
    }

    /// The latest sample, read now unless the last one is fresh (younger
    /// than a quarter of a second). One reader reads at a time; those
    /// that wait meanwhile get its sample. Errors: those of
    /// [`Collector::sample`].
    pub fn latest(&self) -> Result<Arc<Latest>, Error> {
        let fresh = |c: &Cache| c.latest.clone().filter(|l| l.sample.at.elapsed() < FRESH);
        if let Some(l) = fresh(&self.cache.lock()) {
            return Ok(l);
        }
        let mut collect = self.collect.lock();
        if let Some(l) = fresh(&self.cache.lock()) {
            return Ok(l);
        }
        let (collector, window) = &mut *collect;
        let sample = collector.sample()?;
        let (rates, rate_span) = window.rates(&sample);
        window.add(&sample);
        let latest = Arc::new(Latest { sample, rates, rate_span });
        self.cache.lock().latest = Some(latest.clone());
        Ok(latest)
    }

    /// The exposition of the latest sample (and of the source), made once
    /// per sample.
    pub fn exposition(&self) -> Result<Arc<Vec<u8>>, Error> {
        let latest = self.latest()?;
        if let Some((at, text)) = &self.cache.lock().exposition {
            if *at == latest.sample.at {
                return Ok(text.clone());
            }
        }
        let mut out = String::with_capacity(64 * 1024);
        expose::write_queues(&mut out, &latest.sample, self.max_listed);
        if let Some(s) = &self.source {
            s.metrics(&mut out);
        }
        let text = Arc::new(out.into_bytes());
        self.cache.lock().exposition = Some((latest.sample.at, text.clone()));
        Ok(text)
    }
}
