//! `tvmq serve` (being written).

use clap::Args;

/// The options of `tvmq serve`.
#[derive(Args, Clone, Debug)]
pub struct ServeArgs {}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(_dir: &std::path::Path, _args: &ServeArgs) -> Result<(), tvm::Error> {
    Err(tvm::Error::new(tvm::error::NOT_SUPPT_OPT, "tvmq serve is not built yet"))
}
