//! Error replies, in the words of `docs/protocol.md`: a queue error starts
//! with its STVM code name, an unknown key and Redis's own errors with
//! Redis's words; and the text of the HELP subcommands.

use std::io::Write as _;
use tvm::error::{self, DATA_SPC_FULL, Error, SHM_ERR_EIDRM};

/// Appends `-<text>\r\n` where the text is formatted (CR and LF become spaces).
pub(crate) fn error_fmt(out: &mut Vec<u8>, args: std::fmt::Arguments<'_>) {
    let start = out.len();
    out.push(b'-');
    // Writing into a Vec cannot fail.
    let _ = out.write_fmt(args);
    for b in &mut out[start + 1..] {
        if *b == b'\r' || *b == b'\n' {
            *b = b' ';
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends `<prefix>'<bytes>'<suffix>` as an error, the bytes raw (as Redis
/// prints client strings with `%s`: up to the first NUL byte) and at most
/// `max` of them.
pub(crate) fn error_quoting(out: &mut Vec<u8>, prefix: &[u8], bytes: &[u8], suffix: &[u8]) {
    let start = out.len();
    out.push(b'-');
    out.extend_from_slice(prefix);
    out.push(b'\'');
    out.extend_from_slice(c_str(bytes, 128));
    out.push(b'\'');
    out.extend_from_slice(suffix);
    for b in &mut out[start + 1..] {
        if *b == b'\r' || *b == b'\n' {
            *b = b' ';
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// `bytes` as C's `%.<max>s` prints them: up to the first NUL, at most `max`.
pub(crate) fn c_str(bytes: &[u8], max: usize) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len()).min(max);
    &bytes[..end]
}

/// The longest part of a key an error reply echoes, in bytes.
pub(crate) const KEY_ECHO_MAX: usize = 64;

/// A key as an error reply quotes it: at most [`KEY_ECHO_MAX`] bytes of
/// it, escaped ([`tvm::escape_name`]: no control character, no NUL; and a
/// quote as `\x27`, so that the quotes end where the key does), with
/// `...` when it was cut.
pub(crate) fn quoted_key(key: &[u8]) -> String {
    let cut = &key[..key.len().min(KEY_ECHO_MAX)];
    let dots = if cut.len() < key.len() { "..." } else { "" };
    format!("'{}{dots}'", tvm::escape_name(cut).replace('\'', "\\x27"))
}

/// `-ERR no such queue '<key>'` (code TBL_NOT_FOUND for clients).
pub(crate) fn no_such_queue(out: &mut Vec<u8>, key: &[u8]) {
    error_fmt(out, format_args!("ERR no such queue {}", quoted_key(key)));
}

/// `-ERR invalid key '<key>': <why>`.
pub(crate) fn invalid_key(out: &mut Vec<u8>, key: &[u8], why: &str) {
    error_fmt(out, format_args!("ERR invalid key {} ({} bytes): {why}", quoted_key(key), key.len()));
}

/// `-ERR wrong number of arguments for '<cmd>' command`, the name lowercase.
pub(crate) fn wrong_args(out: &mut Vec<u8>, lower_name: &str) {
    error_fmt(out, format_args!("ERR wrong number of arguments for '{lower_name}' command"));
}

/// `-ERR unknown subcommand '<sub>'. Try <CMD> HELP.`
pub(crate) fn unknown_subcommand(out: &mut Vec<u8>, sub: &[u8], cmd: &str) {
    error_quoting(out, b"ERR unknown subcommand ", sub, format!(". Try {cmd} HELP.").as_bytes());
}

/// `-ERR value is not an integer or out of range`.
pub(crate) fn not_an_integer(out: &mut Vec<u8>) {
    resp::error(out, b"ERR value is not an integer or out of range");
}

/// `-ERR syntax error`.
pub(crate) fn syntax_error(out: &mut Vec<u8>) {
    resp::error(out, b"ERR syntax error");
}

/// A null array: `*-1` in RESP2, `_` in RESP3.
pub(crate) fn null_array(out: &mut Vec<u8>, proto: resp::Proto) {
    match proto {
        resp::Proto::Resp2 => resp::null_array(out),
        resp::Proto::Resp3 => resp::null(out, proto),
    }
}

/// A HELP subcommand's reply: its lines, as an array of simple strings.
pub(crate) fn help(out: &mut Vec<u8>, lines: &[&[u8]]) {
    resp::array_header(out, lines.len());
    lines.iter().for_each(|l| resp::simple(out, l));
}

/// A queue error: `-<CODE_NAME> queue <id>: <what happened>` (the detail
/// of the error, or the code's standard message when it has none).
pub(crate) fn queue_error(out: &mut Vec<u8>, id: u32, e: &Error) {
    queue_error_noting(out, id, e, "");
}

/// [`queue_error`] with `note` after its text (` (2 acknowledged before)`).
pub(crate) fn queue_error_noting(out: &mut Vec<u8>, id: u32, e: &Error, note: &str) {
    let name = error::name(i64::from(e.code())).unwrap_or("SVR_EXCEPTION");
    match e.code() {
        DATA_SPC_FULL => error_fmt(out, format_args!("{name} queue {id} is full: no space for insert data{note}")),
        SHM_ERR_EIDRM => error_fmt(out, format_args!("{name} queue {id} was dropped{note}")),
        // A detail that names the queue itself is not prefixed again
        // ("queue 24: queue 24 has no leases").
        _ if starts_with_queue(e.what(), id) => error_fmt(out, format_args!("{name} {}{note}", e.what())),
        _ => error_fmt(out, format_args!("{name} queue {id}: {}{note}", e.what())),
    }
}

/// Does `what` begin with "queue <id>" (then a space, a colon or its end)?
fn starts_with_queue(what: &str, id: u32) -> bool {
    what.strip_prefix("queue ")
        .and_then(|rest| rest.strip_prefix(id.to_string().as_str()))
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', ':', '\'']))
}

/// An error that is not about one queue (auto-creation, lookups):
/// `-<CODE_NAME> <what happened>`.
pub(crate) fn plain_error(out: &mut Vec<u8>, e: &Error) {
    let name = error::name(i64::from(e.code())).unwrap_or("SVR_EXCEPTION");
    error_fmt(out, format_args!("{name} {}", e.what()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tvm::error::{NOT_SUPPT_OPT, RECD_TOO_LONG, TBL_NOT_FOUND};

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn queue_errors_start_with_the_code_name() {
        assert_eq!(
            text(|o| queue_error(o, 21, &Error::code_only(DATA_SPC_FULL))),
            "-DATA_SPC_FULL queue 21 is full: no space for insert data\r\n"
        );
        assert_eq!(
            text(|o| queue_error(o, 21, &Error::code_only(SHM_ERR_EIDRM))),
            "-SHM_ERR_EIDRM queue 21 was dropped\r\n"
        );
        let e = Error::new(RECD_TOO_LONG, "a\r\nb");
        assert!(text(|o| queue_error(o, 3, &e)).starts_with("-RECD_TOO_LONG queue 3: "));
        assert!(text(|o| queue_error(o, 3, &e)).ends_with("a  b\r\n"), "CR LF cannot end the line");
        assert!(text(|o| plain_error(o, &Error::code_only(TBL_NOT_FOUND))).starts_with("-TBL_NOT_FOUND "));
    }

    #[test]
    fn a_detail_naming_its_queue_is_not_prefixed_again() {
        let e = Error::new(NOT_SUPPT_OPT, "queue 24 has no leases (create it with leases: tvmq create --lease-ms ...)");
        assert_eq!(
            text(|o| queue_error(o, 24, &e)),
            "-NOT_SUPPT_OPT queue 24 has no leases (create it with leases: tvmq create --lease-ms ...)\r\n"
        );
        // Another queue's number, or one that merely begins the same, is no match.
        let e = Error::new(NOT_SUPPT_OPT, "queue 245 has no leases");
        assert!(text(|o| queue_error(o, 24, &e)).starts_with("-NOT_SUPPT_OPT queue 24: queue 245 "));
        let e = Error::new(NOT_SUPPT_OPT, "queue 24's dead-letter queue 25 is full");
        assert!(text(|o| queue_error(o, 24, &e)).starts_with("-NOT_SUPPT_OPT queue 24's dead-letter"));
    }

    #[test]
    fn keys_are_quoted_escaped_and_cut() {
        assert_eq!(text(|o| no_such_queue(o, b"mylist")), "-ERR no such queue 'mylist'\r\n");
        assert_eq!(text(|o| no_such_queue(o, b"my\r\nlist\x1b")), "-ERR no such queue 'my\\x0d\\x0alist\\x1b'\r\n");
        assert_eq!(text(|o| no_such_queue(o, b"ab\0cd")), "-ERR no such queue 'ab\\x00cd'\r\n");
        assert_eq!(text(|o| no_such_queue(o, b"a' b")), "-ERR no such queue 'a\\x27 b'\r\n");
        let long = text(|o| no_such_queue(o, &[b'k'; 10_000]));
        assert_eq!(long, format!("-ERR no such queue '{}...'\r\n", "k".repeat(KEY_ECHO_MAX)));
        assert_eq!(text(|o| invalid_key(o, b"", "empty")), "-ERR invalid key '' (0 bytes): empty\r\n");
    }
}
