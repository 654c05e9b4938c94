//! Error codes (the STVM numbers), their messages, and the [`Error`] value
//! every fallible call of this crate returns. No I/O here.

use std::borrow::Cow;
use std::ffi::CStr;
use std::fmt;

pub use crate::codes::CODES;

// `pub const NAME: u32 = code;` for every STVM code, and `C_MESSAGES`.
include!(concat!(env!("OUT_DIR"), "/codes_gen.rs"));

/// Message of codes outside the table (negative ones included).
pub const UNKNOWN_MESSAGE: &CStr = c"unknown error code";

/// An error: an STVM code and a message saying what went wrong.
///
/// It displays as what happened, then the code's name: the specific detail
/// when there is one (`queue 33 cannot be its own dead-letter queue
/// (NOT_SUPPT_OPT)`), else the code's standard message (`queue is full: no
/// space for insert data (DATA_SPC_FULL)`). A detail therefore says what
/// happened on its own, in the terms of the call that failed.
///
/// Its `Debug` form names the code and gives the message too (`Error {
/// code: 97, name: "MQUE_WAIT_TMO", message: "timed out waiting for queue
/// records" }`), since that is what `fn main() -> Result<(), Error>` prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    code: u32,
    detail: Cow<'static, str>,
}

/// Result of this crate's calls.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error with the code's standard message.
    pub const fn code_only(code: u32) -> Error {
        Error { code, detail: Cow::Borrowed("") }
    }

    /// An error with a specific detail: a sentence saying what happened, shown
    /// instead of the code's standard message.
    pub fn new(code: u32, detail: impl Into<Cow<'static, str>>) -> Error {
        Error { code, detail: detail.into() }
    }

    /// The STVM code (index into [`CODES`]).
    pub fn code(&self) -> u32 {
        self.code
    }

    /// The specific detail, empty when there is none.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// What happened, without the code's name: the detail, or the code's
    /// standard message when there is none.
    pub fn what(&self) -> &str {
        if self.detail.is_empty() { message(i64::from(self.code)) } else { &self.detail }
    }
}

impl From<u32> for Error {
    fn from(code: u32) -> Error {
        Error::code_only(code)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = name(i64::from(self.code)).unwrap_or("UNKNOWN");
        write!(f, "{} ({name})", self.what())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("code", &self.code)
            .field("name", &name(i64::from(self.code)).unwrap_or("UNKNOWN"))
            .field("message", &self.what())
            .finish()
    }
}

impl std::error::Error for Error {}

fn entry(code: i64) -> Option<&'static (&'static str, &'static str)> {
    usize::try_from(code).ok().and_then(|i| CODES.get(i))
}

/// The code's message; any other value gives a generic text.
pub fn message(code: i64) -> &'static str {
    entry(code).map_or("unknown error code", |e| e.1)
}

/// The code's macro name (`"TBL_NOT_FOUND"`), if it is one.
pub fn name(code: i64) -> Option<&'static str> {
    entry(code).map(|e| e.0)
}

/// NUL-terminated macro name for C (`c"TBL_NOT_FOUND"`), if the code is one.
pub fn c_name(code: i64) -> Option<&'static CStr> {
    usize::try_from(code).ok().and_then(|i| C_NAMES.get(i).copied())
}

/// NUL-terminated message for C; never fails.
pub fn c_message(code: i64) -> &'static CStr {
    usize::try_from(code).ok().and_then(|i| C_MESSAGES.get(i).copied()).unwrap_or(UNKNOWN_MESSAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_match_the_spec() {
        // STVM's 103 (0..=102), then tvmq's own.
        assert_eq!(CODES.len(), 109);
        assert_eq!(NOT_DURABLE, 103);
        assert_eq!(SYNC_FAILED, 104);
        assert_eq!(TVM_DONE_SUCC, 0);
        assert_eq!(CONDIT_IS_NIL, 3);
        assert_eq!(DATA_SPC_FULL, 4);
        assert_eq!(SHM_ERR_EIDRM, 8);
        assert_eq!(NO_DATA_FOUND, 24);
        assert_eq!(TBL_NOT_FOUND, 44);
        assert_eq!(SOCK_CONN_ERR, 50);
        assert_eq!(RECD_TOO_LONG, 74);
        assert_eq!(TBL_ARD_EXIST, 87);
        assert_eq!(MQUE_WAIT_TMO, 97);
        assert_eq!(MQUE_CRTE_BIG, 99);
        assert_eq!(SERV_NOT_CONN, 101);
        assert_eq!(PART_AR_EXIST, 102);
        assert_eq!((LEASE_EXPIRED, LEASE_LIMIT, LEASE_INVALID, REPL_TIMEOUT), (105, 106, 107, 108));
    }

    #[test]
    fn names_and_messages_are_distinct_and_present() {
        let mut names: Vec<_> = CODES.iter().map(|c| c.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CODES.len());
        for (i, (_, msg)) in CODES.iter().enumerate() {
            assert!(!msg.is_empty());
            assert_eq!(c_message(i as i64).to_str().unwrap(), *msg);
            assert_eq!(c_name(i as i64).unwrap().to_str().unwrap(), CODES[i].0);
        }
    }

    #[test]
    fn out_of_range_codes_are_unknown() {
        for code in [-1, -100, CODES.len() as i64, 1_000_000, i64::MIN, i64::MAX] {
            assert_eq!(message(code), "unknown error code");
            assert_eq!(c_message(code), UNKNOWN_MESSAGE);
            assert_eq!(name(code), None);
            assert_eq!(c_name(code), None);
        }
    }

    #[test]
    fn display_names_the_code() {
        // What happened first, in the caller's terms; the code's name last.
        let e = Error::new(TBL_NOT_FOUND, "no queue 21 in /tmp");
        assert_eq!(e.to_string(), "no queue 21 in /tmp (TBL_NOT_FOUND)");
        assert_eq!(e.what(), "no queue 21 in /tmp");
        assert_eq!(Error::code_only(DATA_SPC_FULL).what(), "queue is full: no space for insert data");
        assert_eq!(
            Error::code_only(DATA_SPC_FULL).to_string(),
            "queue is full: no space for insert data (DATA_SPC_FULL)"
        );
    }

    #[test]
    fn debug_names_the_code_and_gives_the_message() {
        // What `fn main() -> Result<(), Error>` prints on an error.
        assert_eq!(
            format!("{:?}", Error::code_only(MQUE_WAIT_TMO)),
            r#"Error { code: 97, name: "MQUE_WAIT_TMO", message: "timed out waiting for queue records" }"#
        );
        assert_eq!(
            format!("{:?}", Error::new(TBL_NOT_FOUND, "no queue 21 in /tmp")),
            r#"Error { code: 44, name: "TBL_NOT_FOUND", message: "no queue 21 in /tmp" }"#
        );
        assert_eq!(
            format!("{:?}", Error::code_only(5000)),
            r#"Error { code: 5000, name: "UNKNOWN", message: "unknown error code" }"#
        );
    }
}
