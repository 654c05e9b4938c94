//! Helpers shared by the integration tests (each test binary uses a part):
//! the library's own test support, compiled into each test binary, and what
//! needs the library itself.
#![allow(dead_code)]

#[path = "../../src/test_support.rs"]
mod support;

#[allow(unused_imports)]
pub use support::*;

/// An error code with its name, as a failure message shows it.
pub fn code_name(code: u32) -> String {
    format!("{code} {}", tvm::error::name(i64::from(code)).unwrap_or("?"))
}
