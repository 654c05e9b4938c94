//! Seeing tvmq's queues: every counter of every queue of a directory, read
//! from shared memory without a server and without slowing the queues, as
//! a sample ([`collect`]), rates ([`rates`]), the Prometheus text format
//! ([`expose`]), the web dashboard's JSON ([`api`]) and page ([`page`]),
//! served by a bounded HTTP server ([`http`]). `tvmq top` and `tvmq
//! metrics` use it, and `tvmq serve --metrics-port`, which adds its own
//! counters through a [`Source`].
//!
//! # Shape
//! Each module uses only modules below it in this table:
//!
//! | module | concern | uses |
//! |---|---|---|
//! | [`http`] | the HTTP server: limits, authentication, routes | `api`, `page`, `state`, `expose`, `collect` |
//! | [`state`] | the [`Watch`] requests share: collector, rates window, cached sample and exposition; the [`Source`] trait | `collect`, `rates`, `expose` |
//! | [`api`] | `/api/queues`: queries, sorting, the JSON | `collect`, `rates`, `state` (its types) |
//! | [`expose`] | the text exposition format | `collect` |
//! | [`rates`] | rates from counters over a span | `collect` |
//! | [`collect`] | read-only views of a directory's queues, samples | - |
//! | [`page`] | the dashboard's page and script, embedded | - |
//!
//! ```no_run
//! use std::sync::Arc;
//! use tvmq_watch::{Http, HttpOptions, Watch};
//!
//! let watch = Arc::new(Watch::new(std::path::Path::new("/dev/shm/my-queues"), 10_000, None));
//! let listener = std::net::TcpListener::bind("127.0.0.1:9100").unwrap();
//! let http = Http::start(listener, watch, HttpOptions::default())?;
//! println!("http://{}/", http.local_addr());
//! # Ok::<(), tvm::Error>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod api;
pub mod collect;
pub mod expose;
pub mod http;
pub mod page;
pub mod rates;
pub mod state;

pub use collect::{Collector, QueueSample, Sample};
pub use http::{Http, HttpOptions};
pub use rates::{Rates, Window};
pub use state::{DEFAULT_MAX_LISTED, Latest, Source, Watch};
