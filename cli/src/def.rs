//! STVM queue definition files (`tvmq create --def FILE`):
//!
//! ```text
//! set TABLE=22
//! set TABLESPACE=10000
//!
//! create queue QUEUE_USER_FIELD
//! (
//!     acct_id     long,
//!     user_no     char(21),
//!     user_type   char[2]
//! );
//! ```
//!
//! `set TABLE` gives the next queue's id, `set TABLESPACE` its rows; each
//! `create queue NAME ( field type, ... );` makes one queue whose record is
//! laid out as a C compiler lays out the equivalent struct on x86-64 (each
//! field at the next multiple of its alignment, the size rounded up to the
//! largest alignment). Types: `long` (8 bytes), `int` (4), `short` (2),
//! `double` (8), `char` (1), `char(n)` / `char[n]` (n). Keywords and types
//! are case-insensitive; comments are `--`, `#` or `//` to the end of the
//! line, and `/* ... */`. Errors name the file, line and column.

use tvm::{Field, FieldKind, Spec};

/// One queue of a definition file.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueDef {
    pub id: u32,
    pub rows: u64,
    pub name: String,
    pub record_size: u64,
    pub fields: Vec<Field>,
    /// Line of its `create` statement.
    pub line: usize,
}

impl QueueDef {
    /// What to create, with the other settings of `base`.
    pub fn spec(&self, base: &Spec) -> Spec {
        let mut spec = base.clone();
        spec.rows = self.rows;
        spec.record_size = self.record_size;
        spec.name = self.name.clone();
        spec.fields = self.fields.clone();
        spec
    }
}

/// A syntax or meaning error at a place in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Number(u64),
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
    column: usize,
}

fn lex(text: &str) -> Result<Vec<Token>, DefError> {
    let chars: Vec<char> = text.chars().collect();
    let (mut i, mut line, mut col) = (0, 1, 1);
    let mut out = Vec::new();
    let err = |line, column, message: String| Err(DefError { line, column, message });
    while i < chars.len() {
        let c = chars[i];
        let at = (line, col);
        let advance = |n: usize, i: &mut usize, col: &mut usize| {
            *i += n;
            *col += n;
        };
        match c {
            '\n' => {
                i += 1;
                line += 1;
                col = 1;
            }
            c if c.is_whitespace() => advance(1, &mut i, &mut col),
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    advance(1, &mut i, &mut col);
                }
            }
            '-' | '/' if chars.get(i + 1) == Some(&c) => {
                while i < chars.len() && chars[i] != '\n' {
                    advance(1, &mut i, &mut col);
                }
            }
            '/' if chars.get(i + 1) == Some(&'*') => {
                advance(2, &mut i, &mut col);
                loop {
                    match chars.get(i) {
                        None => return err(at.0, at.1, "unterminated comment /* ...".into()),
                        Some('*') if chars.get(i + 1) == Some(&'/') => {
                            advance(2, &mut i, &mut col);
                            break;
                        }
                        Some('\n') => {
                            i += 1;
                            line += 1;
                            col = 1;
                        }
                        Some(_) => advance(1, &mut i, &mut col),
                    }
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    advance(1, &mut i, &mut col);
                }
                out.push(Token { tok: Tok::Word(chars[start..i].iter().collect()), line: at.0, column: at.1 });
            }
            c if c.is_ascii_digit() => {
                let start = i;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    advance(1, &mut i, &mut col);
                }
                let digits: String = chars[start..i].iter().collect();
                let Ok(n) = digits.parse::<u64>() else {
                    return err(at.0, at.1, format!("number {digits} is too large"));
                };
                out.push(Token { tok: Tok::Number(n), line: at.0, column: at.1 });
            }
            '=' | '(' | ')' | '[' | ']' | ',' | ';' => {
                out.push(Token { tok: Tok::Punct(c), line: at.0, column: at.1 });
                advance(1, &mut i, &mut col);
            }
            other => return err(at.0, at.1, format!("unexpected character {other:?}")),
        }
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Token>,
    at: usize,
    /// Where the file ends, for "expected ... at the end of the file".
    end: (usize, usize),
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.toks.get(self.at)
    }

    fn place(&self) -> (usize, usize) {
        self.peek().map_or(self.end, |t| (t.line, t.column))
    }

    fn fail<T>(&self, message: String) -> Result<T, DefError> {
        let (line, column) = self.place();
        Err(DefError { line, column, message })
    }

    fn found(&self) -> String {
        match self.peek().map(|t| &t.tok) {
            None => "the end of the file".into(),
            Some(Tok::Word(w)) => format!("{w:?}"),
            Some(Tok::Number(n)) => format!("{n}"),
            Some(Tok::Punct(c)) => format!("'{c}'"),
        }
    }

    fn word(&mut self, what: &str) -> Result<String, DefError> {
        match self.peek().map(|t| t.tok.clone()) {
            Some(Tok::Word(w)) => {
                self.at += 1;
                Ok(w)
            }
            _ => self.fail(format!("expected {what}, found {}", self.found())),
        }
    }

    fn keyword(&mut self, kw: &str) -> Result<(), DefError> {
        match self.peek().map(|t| &t.tok) {
            Some(Tok::Word(w)) if w.eq_ignore_ascii_case(kw) => {
                self.at += 1;
                Ok(())
            }
            _ => self.fail(format!("expected {kw:?}, found {}", self.found())),
        }
    }

    fn number(&mut self, what: &str) -> Result<u64, DefError> {
        match self.peek().map(|t| &t.tok) {
            Some(Tok::Number(n)) => {
                let n = *n;
                self.at += 1;
                Ok(n)
            }
            _ => self.fail(format!("expected {what}, found {}", self.found())),
        }
    }

    fn punct(&mut self, c: char) -> Result<(), DefError> {
        if self.is(c) {
            self.at += 1;
            Ok(())
        } else {
            self.fail(format!("expected '{c}', found {}", self.found()))
        }
    }

    fn is(&self, c: char) -> bool {
        matches!(self.peek().map(|t| &t.tok), Some(Tok::Punct(p)) if *p == c)
    }
}

/// A C type of a field: size, alignment and kind.
fn c_type(p: &mut Parser) -> Result<(u64, u64, FieldKind), DefError> {
    let (line, column) = p.place();
    let ty = p.word("a type (long, int, short, double, char(n))")?;
    Ok(match ty.to_ascii_lowercase().as_str() {
        "long" => (8, 8, FieldKind::Long),
        "int" => (4, 4, FieldKind::Long),
        "short" => (2, 2, FieldKind::Long),
        "double" => (8, 8, FieldKind::Double),
        "char" => {
            let close = if p.is('(') {
                ')'
            } else if p.is('[') {
                ']'
            } else {
                return Ok((1, 1, FieldKind::Char));
            };
            p.at += 1;
            let n = p.number("a length")?;
            if n == 0 {
                return Err(DefError { line, column, message: "char(0): a field holds at least one byte".into() });
            }
            p.punct(close)?;
            (n, 1, FieldKind::Char)
        }
        _ => {
            return Err(DefError {
                line,
                column,
                message: format!("unknown type {ty:?} (use long, int, short, double, char(n) or char[n])"),
            });
        }
    })
}

/// Parses a definition file's text.
pub fn parse(text: &str) -> Result<Vec<QueueDef>, DefError> {
    let toks = lex(text)?;
    let end = (text.lines().count().max(1), text.lines().last().map_or(1, |l| l.chars().count() + 1));
    let mut p = Parser { toks, at: 0, end };
    let (mut table, mut space): (Option<u32>, Option<u64>) = (None, None);
    let mut queues: Vec<QueueDef> = Vec::new();
    while let Some(t) = p.peek().cloned() {
        let Tok::Word(w) = &t.tok else {
            return p.fail(format!("expected \"set\" or \"create\", found {}", p.found()));
        };
        match w.to_ascii_lowercase().as_str() {
            "set" => {
                p.at += 1;
                let (line, column) = p.place();
                let var = p.word("a setting (TABLE or TABLESPACE)")?;
                p.punct('=')?;
                let (nl, nc) = p.place();
                let value = p.number("a number")?;
                match var.to_ascii_uppercase().as_str() {
                    "TABLE" => {
                        let id = u32::try_from(value).map_err(|_| DefError {
                            line: nl,
                            column: nc,
                            message: format!("TABLE {value} is not a queue id (0 to {})", u32::MAX),
                        })?;
                        table = Some(id);
                    }
                    "TABLESPACE" => {
                        if value == 0 {
                            return Err(DefError {
                                line: nl,
                                column: nc,
                                message: "TABLESPACE 0: a queue holds at least one record".into(),
                            });
                        }
                        space = Some(value);
                    }
                    _ => {
                        return Err(DefError {
                            line,
                            column,
                            message: format!("unknown setting {var:?} (TABLE or TABLESPACE)"),
                        });
                    }
                }
                if p.is(';') {
                    p.at += 1;
                }
            }
            "create" => {
                p.at += 1;
                p.keyword("queue")?;
                let (nl, nc) = p.place();
                let name = p.word("the queue's name")?;
                if name.len() > tvm::MAX_NAME {
                    return Err(DefError {
                        line: nl,
                        column: nc,
                        message: format!(
                            "queue name {name:?} is {} bytes: a queue keeps at most {}",
                            name.len(),
                            tvm::MAX_NAME
                        ),
                    });
                }
                let Some(id) = table else {
                    return Err(DefError {
                        line: t.line,
                        column: t.column,
                        message: "no \"set TABLE=<id>\" before this queue".into(),
                    });
                };
                let Some(rows) = space else {
                    return Err(DefError {
                        line: t.line,
                        column: t.column,
                        message: "no \"set TABLESPACE=<rows>\" before this queue".into(),
                    });
                };
                if let Some(q) = queues.iter().find(|q| q.id == id) {
                    return Err(DefError {
                        line: t.line,
                        column: t.column,
                        message: format!(
                            "TABLE {id} is already used by queue {} (line {}): set another TABLE",
                            q.name, q.line
                        ),
                    });
                }
                p.punct('(')?;
                let (mut offset, mut align, mut fields) = (0u64, 1u64, Vec::<Field>::new());
                loop {
                    let (fl, fc) = p.place();
                    let fname = p.word("a field name")?;
                    if fields.iter().any(|f| f.name.eq_ignore_ascii_case(&fname)) {
                        return Err(DefError {
                            line: fl,
                            column: fc,
                            message: format!("field {fname:?} defined twice"),
                        });
                    }
                    if fname.len() > tvm::MAX_FIELD_NAME {
                        return Err(DefError {
                            line: fl,
                            column: fc,
                            message: format!("field name {fname:?} is longer than {} bytes", tvm::MAX_FIELD_NAME),
                        });
                    }
                    let (size, a, kind) = c_type(&mut p)?;
                    offset = offset.div_ceil(a) * a;
                    let (Ok(o), Ok(l)) = (u32::try_from(offset), u32::try_from(size)) else {
                        return Err(DefError { line: fl, column: fc, message: "record too large".into() });
                    };
                    fields.push(Field { name: fname, offset: o, len: l, kind });
                    offset += size;
                    align = align.max(a);
                    if p.is(',') {
                        p.at += 1;
                        continue;
                    }
                    p.punct(')')?;
                    break;
                }
                if fields.len() > tvm::MAX_FIELDS {
                    return Err(DefError {
                        line: t.line,
                        column: t.column,
                        message: format!("{} fields: at most {}", fields.len(), tvm::MAX_FIELDS),
                    });
                }
                if p.is(';') {
                    p.at += 1;
                }
                queues.push(QueueDef {
                    id,
                    rows,
                    name,
                    record_size: offset.div_ceil(align) * align,
                    fields,
                    line: t.line,
                });
            }
            _ => return p.fail(format!("expected \"set\" or \"create\", found {}", p.found())),
        }
    }
    if queues.is_empty() {
        return Err(DefError { line: end.0, column: end.1, message: "no \"create queue\" in the file".into() });
    }
    Ok(queues)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = "set TABLE=22\nset TABLESPACE=10000\n\ncreate queue QUEUE_USER_FIELD\n(\n    acct_id     long,\n    user_no     char(21),\n    user_type   char[2],\n    user_nm     char[81],\n    user_addr   char[161],\n    user_phone  char[31]\n);\n";

    #[test]
    fn the_seed_struct_is_304_bytes() {
        let q = parse(SEED).unwrap();
        assert_eq!(q.len(), 1);
        let q = &q[0];
        assert_eq!((q.id, q.rows, q.name.as_str(), q.record_size), (22, 10000, "QUEUE_USER_FIELD", 304));
        let offsets: Vec<u32> = q.fields.iter().map(|f| f.offset).collect();
        assert_eq!(offsets, [0, 8, 29, 31, 112, 273]);
    }

    #[test]
    fn errors_name_line_and_column() {
        let long_name = format!("set TABLE=1\nset TABLESPACE=5\ncreate queue {} (a long);", "Q".repeat(64));
        let cases = [
            ("set TABLE=1\nset TABLESPACE=5\ncreate queue Q (a float);", 3, 19, "unknown type"),
            ("set TABLE=1\ncreate queue Q (a long);", 2, 1, "TABLESPACE"),
            ("set TABLESPACE=1\ncreate queue Q (a long);", 2, 1, "TABLE"),
            ("set TABLE=1\nset TABLESPACE=5\ncreate queue Q (a long b int);", 3, 24, "expected ')'"),
            ("set TABLE=1\nset TABLESPACE=5\ncreate queue Q (a long,\n  a int);", 4, 3, "defined twice"),
            ("set TABLE=1\nset SIZE=5", 2, 5, "unknown setting"),
            ("set TABLE=1\nset TABLESPACE=5\ncreate queue Q (a char(0));", 3, 19, "char(0)"),
            ("set TABLE=99999999999\n", 1, 11, "not a queue id"),
            ("set TABLE=1\nset TABLESPACE=5\ncreate queue Q (a long", 3, 23, "end of the file"),
            ("set TABLE=1 @", 1, 13, "unexpected character"),
            ("/* never closed", 1, 1, "unterminated"),
            ("", 1, 1, "no \"create queue\""),
            ("set TABLE=1\nset TABLESPACE=5\ncreate queue A (a long);\ncreate queue B (b long);", 4, 1, "already used"),
            (&long_name, 3, 14, "a queue keeps at most 63"),
        ];
        for (text, line, column, words) in cases {
            let e = parse(text).unwrap_err();
            assert_eq!((e.line, e.column), (line, column), "{text:?}: {e:?}");
            assert!(e.message.contains(words), "{text:?}: {}", e.message);
        }
    }

    #[test]
    fn comments_case_and_several_queues() {
        let text = "# queues\nSET table = 1 ; set tablespace=3 -- rows\nCREATE QUEUE a ( x SHORT, /* pad */ y DOUBLE, z char );\n// next\nset TABLE=2\ncreate queue b (s char(3), i int)\n";
        let q = parse(text).unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!((q[0].id, q[0].rows, q[0].record_size), (1, 3, 24));
        assert_eq!(q[0].fields.iter().map(|f| f.offset).collect::<Vec<_>>(), [0, 8, 16]);
        assert_eq!((q[1].id, q[1].rows, q[1].record_size), (2, 3, 8));
        assert_eq!(q[1].fields[1].offset, 4);
    }
}
