//! The grammar of MIMIC-III de-identification placeholders, `[** ... **]` (DESIGN.md §7).
//!
//! [`find`] scans a text once and returns every placeholder with its byte and code-point
//! offsets and its parsed form:
//! * `[** **]`: [`Form::Empty`];
//! * `[**2149-3-4**]`, `[**9/2167**]`, `[**2149**]`, `[**3-4**]`, `[**3/4**]`: [`Form::Date`];
//! * `[**Age over 90 **]`: [`Form::AgeOver90`];
//! * `[**Known lastname 4015**]`, `[**Telephone/Fax (1) 123**]`, `[**Last Name (un) **]`:
//!   [`Form::Named`], a category, an optional qualifier in parentheses and an optional id;
//! * an opening `[**` with no closing `**]` before the next opening or the end of the text:
//!   [`Form::Unterminated`] (only the three opening bytes), and a closing `**]` with no
//!   opening: [`Form::StrayClose`]. A placeholder nested in another one is parsed on its own;
//!   the outer opening is unterminated and the outer closing stray.

/// Byte range `start..end` within the placeholder's text.
pub type Range = (usize, usize);

/// A date written inside a placeholder; absent parts are 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Date {
    pub year: u32,
    pub month: u32,
    pub day: u32,
    pub shape: DateShape,
}

/// How a date placeholder was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DateShape {
    /// `2149-3-4`
    YearMonthDay,
    /// `9/2167`
    MonthYear,
    /// `2149`
    Year,
    /// `3-4`
    MonthDayDash,
    /// `3/4`
    MonthDaySlash,
}

/// The parsed content of a placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Form {
    Empty,
    AgeOver90,
    Date(Date),
    Named {
        category: Range,
        qualifier: Option<Range>,
        id: Option<Range>,
    },
    Unterminated,
    StrayClose,
}

/// One placeholder: `text[start..end]` in bytes, `char_start..char_end` in code points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder {
    pub start: usize,
    pub end: usize,
    pub char_start: usize,
    pub char_end: usize,
    pub form: Form,
}

const OPEN: &[u8] = b"[**";
const CLOSE: &[u8] = b"**]";

fn find_from(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if from >= hay.len() {
        return None;
    }
    memchr::memmem::find(&hay[from..], needle).map(|p| p + from)
}

fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_date(inner: &str) -> Option<Date> {
    let date = |year, month, day, shape| {
        let ok_month = month == 0 || (1..=12).contains(&month);
        let ok_day = day == 0 || (1..=31).contains(&day);
        (ok_month && ok_day).then_some(Date {
            year,
            month,
            day,
            shape,
        })
    };
    let dash: Vec<&str> = inner.split('-').collect();
    let slash: Vec<&str> = inner.split('/').collect();
    match (dash.len(), slash.len()) {
        (3, 1) if dash[0].len() == 4 => date(
            digits(dash[0])?,
            digits(dash[1])?,
            digits(dash[2])?,
            DateShape::YearMonthDay,
        ),
        (2, 1) if dash[0].len() <= 2 && dash[1].len() <= 2 => date(
            0,
            digits(dash[0])?,
            digits(dash[1])?,
            DateShape::MonthDayDash,
        ),
        (1, 2) if slash[1].len() == 4 => date(
            digits(slash[1])?,
            digits(slash[0])?,
            0,
            DateShape::MonthYear,
        ),
        (1, 2) if slash[0].len() <= 2 && slash[1].len() <= 2 => date(
            0,
            digits(slash[0])?,
            digits(slash[1])?,
            DateShape::MonthDaySlash,
        ),
        (1, 1) if inner.len() == 4 => date(digits(inner)?, 0, 0, DateShape::Year),
        _ => None,
    }
}

/// Parse the content between `[**` and `**]`; `base` is its byte offset in the text.
pub fn parse_inner(inner: &str, base: usize) -> Form {
    let trimmed = inner.trim();
    if trimmed.is_empty() {
        return Form::Empty;
    }
    let at = |s: &str| -> Range {
        let off = s.as_ptr() as usize - inner.as_ptr() as usize;
        (base + off, base + off + s.len())
    };
    if trimmed.eq_ignore_ascii_case("age over 90") {
        return Form::AgeOver90;
    }
    if let Some(d) = parse_date(trimmed) {
        return Form::Date(d);
    }
    // Category [ (Qualifier) ] [ Id ]
    let mut rest = trimmed;
    let mut id = None;
    if let Some((pos, c)) = rest.char_indices().rev().find(|(_, c)| !c.is_ascii_digit()) {
        let split = pos + c.len_utf8();
        let tail = &rest[split..];
        let before = &rest[..split];
        if !tail.is_empty() && (before.ends_with(' ') || before.ends_with(')')) {
            id = Some(at(tail));
            rest = before.trim_end();
        }
    }
    let mut qualifier = None;
    if rest.ends_with(')') {
        if let Some(open) = rest.rfind('(') {
            let q = &rest[open + 1..rest.len() - 1];
            let category = rest[..open].trim_end();
            if !category.is_empty() {
                qualifier = Some(at(q));
                rest = category;
            }
        }
    }
    Form::Named {
        category: at(rest),
        qualifier,
        id,
    }
}

/// Every placeholder of `text`, in order.
pub fn find(text: &str) -> Vec<Placeholder> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut chars = 0usize; // code points before `seen`
    let mut seen = 0usize;
    let mut char_at = |pos: usize| -> usize {
        chars += text[seen..pos].chars().count();
        seen = pos;
        chars
    };
    let mut pos = 0usize;
    loop {
        let open = find_from(bytes, OPEN, pos);
        let close = find_from(bytes, CLOSE, pos);
        match (open, close) {
            (None, None) => break,
            (o, Some(c)) if o.map_or(true, |o| c < o) => {
                // A closing marker before any opening one.
                let (s, e) = (c, c + CLOSE.len());
                let cs = char_at(s);
                out.push(Placeholder {
                    start: s,
                    end: e,
                    char_start: cs,
                    char_end: cs + CLOSE.len(),
                    form: Form::StrayClose,
                });
                pos = e;
            }
            (Some(o), close) => {
                let inner_start = o + OPEN.len();
                let next_open = find_from(bytes, OPEN, inner_start);
                // A closing marker that overlaps the opening one (`[**]`) does not close it.
                let close = close
                    .filter(|&c| c >= inner_start)
                    .or_else(|| find_from(bytes, CLOSE, inner_start));
                match close {
                    Some(c) if next_open.map_or(true, |n| c < n) => {
                        let e = c + CLOSE.len();
                        let form = parse_inner(&text[inner_start..c], inner_start);
                        let cs = char_at(o);
                        let ce = char_at(e);
                        out.push(Placeholder {
                            start: o,
                            end: e,
                            char_start: cs,
                            char_end: ce,
                            form,
                        });
                        pos = e;
                    }
                    _ => {
                        let cs = char_at(o);
                        out.push(Placeholder {
                            start: o,
                            end: inner_start,
                            char_start: cs,
                            char_end: cs + OPEN.len(),
                            form: Form::Unterminated,
                        });
                        pos = inner_start;
                    }
                }
            }
            (None, Some(_)) => unreachable!("handled by the stray-close arm"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Form {
        let mut all = find(text);
        assert_eq!(all.len(), 1, "{text}");
        all.pop().unwrap().form
    }

    fn named(text: &str) -> (String, Option<String>, Option<String>) {
        match one(text) {
            Form::Named {
                category,
                qualifier,
                id,
            } => {
                let s = |r: Range| text[r.0..r.1].to_string();
                (s(category), qualifier.map(s), id.map(s))
            }
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn named_forms() {
        let n = |c: &str, q: Option<&str>, i: Option<&str>| {
            (c.to_string(), q.map(String::from), i.map(String::from))
        };
        assert_eq!(
            named("x [**Known lastname 4015**] y"),
            n("Known lastname", None, Some("4015"))
        );
        assert_eq!(
            named("[**Telephone/Fax (1) 123**]"),
            n("Telephone/Fax", Some("1"), Some("123"))
        );
        assert_eq!(
            named("[**Hospital1 18**]"),
            n("Hospital1", None, Some("18"))
        );
        assert_eq!(
            named("[**Last Name (un) **]"),
            n("Last Name", Some("un"), None)
        );
        assert_eq!(
            named("[**MD Number(1) 123**]"),
            n("MD Number", Some("1"), Some("123"))
        );
        assert_eq!(
            named("[**Doctor Last Name **]"),
            n("Doctor Last Name", None, None)
        );
        assert_eq!(
            named("[**First Name4 (NamePattern1) 1234**]"),
            n("First Name4", Some("NamePattern1"), Some("1234"))
        );
    }

    #[test]
    fn dates_age_and_empty() {
        let d = |y, m, dd, shape| {
            Form::Date(Date {
                year: y,
                month: m,
                day: dd,
                shape,
            })
        };
        assert_eq!(
            one("[**2149-3-4**]"),
            d(2149, 3, 4, DateShape::YearMonthDay)
        );
        assert_eq!(one("[**9/2167**]"), d(2167, 9, 0, DateShape::MonthYear));
        assert_eq!(one("[**2149**]"), d(2149, 0, 0, DateShape::Year));
        assert_eq!(one("[**3-4**]"), d(0, 3, 4, DateShape::MonthDayDash));
        assert_eq!(one("[**12/31**]"), d(0, 12, 31, DateShape::MonthDaySlash));
        // Not a date: month 13 is a named placeholder with an id.
        assert!(matches!(one("[**13-40**]"), Form::Named { .. }));
        assert_eq!(one("[**Age over 90 **]"), Form::AgeOver90);
        assert_eq!(one("[** **]"), Form::Empty);
        assert_eq!(one("[****]"), Form::Empty);
    }

    #[test]
    fn malformed_and_offsets() {
        let text = "é [**Name 1 and [**2149**] x**] end [**open";
        let all = find(text);
        let forms: Vec<_> = all.iter().map(|p| p.form.clone()).collect();
        assert_eq!(forms[0], Form::Unterminated);
        assert!(matches!(forms[1], Form::Date(_)));
        assert_eq!(forms[2], Form::StrayClose);
        assert_eq!(forms[3], Form::Unterminated);
        assert_eq!(forms.len(), 4);
        let chars: Vec<char> = text.chars().collect();
        for p in &all {
            let by_chars: String = chars[p.char_start..p.char_end].iter().collect();
            assert_eq!(by_chars, &text[p.start..p.end]);
        }
        assert_eq!(all[1].char_start, 16);
        assert!(find("no placeholders here").is_empty());
        assert!(matches!(
            one("[**Ă¸æÞ 12**]"),
            Form::Named { id: Some(_), .. }
        ));
        assert!(matches!(one("[**Þ**]"), Form::Named { id: None, .. }));
        assert!(find("").is_empty());
    }
}
