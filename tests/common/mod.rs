//! Helpers shared by the integration tests (each test binary uses a part):
//! the library's own test support, compiled into each test binary.

#[path = "../../src/test_support.rs"]
mod support;

#[allow(unused_imports)]
pub use support::*;
