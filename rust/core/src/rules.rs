//! Rule recognizers for direct identifiers (DESIGN.md §3): dates in clinical forms (times are
//! not dates), phone and pager numbers, e-mail, URLs, IP addresses, SSNs, ZIP codes, ages over
//! 89, record and other identifier numbers after their context words, places before a facility
//! word and after `lives in`, organisations before their kind (`University`, `Corp.`), after
//! `University of` and after working or studying at, and person names after a title (`Dr.`,
//! `Mrs`), a relation (`wife`, `daughters Ann and Jo`), before a relation (`Mary (wife)`) or
//! before a credential (`RN`). Two-digit years count after a month, a season or a medical
//! event, after an apostrophe and at the end of a range (`1996-98`).
//!
//! [`detect`] runs every rule over a text and returns the detections with byte and code-point
//! offsets, sorted; overlapping detections are kept (the caller merges them).

use std::sync::OnceLock;

use regex::Regex;

/// One detection: `text[start..end]` in bytes, `char_start..char_end` in code points.
#[derive(Debug, Clone, PartialEq)]
pub struct Detection {
    pub start: usize,
    pub end: usize,
    pub char_start: usize,
    pub char_end: usize,
    /// `DATE`, `PHONE`, `EMAIL`, `URL`, `IP`, `SSN`, `ZIP`, `AGE`, `ID`, `LOCATION` or `NAME`.
    pub label: &'static str,
    /// The rule that found it (for the `source` of a span).
    pub rule: &'static str,
    pub score: f32,
}

type Check = fn(&str, usize, usize) -> bool;

/// How a rule's groups (`phi`, `phi2`, `phi3`) are checked.
#[derive(Clone, Copy, PartialEq)]
enum Order {
    /// Each on its own (dates, places after a trigger).
    Each,
    /// From the first: a word that fails ends the run (a name after a title: "Dr. Lee
    /// aware" stops at "aware").
    Forward,
    /// From the last: a word that fails ends the run backwards (words before an anchor:
    /// in "Professor At Towson University", "At" fails and "Professor" is never taken).
    Backward,
}

struct Rule {
    name: &'static str,
    label: &'static str,
    score: f32,
    re: Regex,
    check: Check,
    order: Order,
}

/// Words that end a name or are never one (function words, clinical words that follow a
/// title or a relation word in notes: "Dr. aware", "wife called").
const NOT_NAMES: &str = "a about above after again against all also am an and any are as at \
    aware away back be been before being below between both but by call called calling came \
    can cannot come comes coming could did do does doing done down during each else every few \
    for from further had has have having he her here hers herself him himself his how i if in \
    into is it its itself just know let me more most much must my myself no nor not now of off \
    on once only or other our ours out over own paged per phone present re regarding said same \
    saw see seen she should so some spoke still such than that the their theirs them then there \
    these they this those through to today tonight too under until up updated us very visit \
    visited visiting was we were what when where which while who whom why will with would yet \
    you your notified informed made made aware team service office on-call covering fellow \
    resident attending nurse rn md np note notes order orders ordered states stated reports \
    reported says feels wants wanted asked request requested prn pt pts patient patients family \
    home with via and/or plan plans ok okay unit icu ccu micu sicu csru floor bed room hospital \
    rehab clinic by x y n s p h o e w who's pt's involved also both two three four several \
    staff contacted contact number numbers will would please thanks thank left right";

/// [`NOT_NAMES`] and the relation words themselves ("wife and son-in-law", "twin sister").
fn not_names() -> &'static hashbrown::HashSet<&'static str> {
    static SET: OnceLock<hashbrown::HashSet<&'static str>> = OnceLock::new();
    SET.get_or_init(|| {
        let relations = [
            RELATIONS,
            RELATION_GROUPS,
            "in-law in-laws law twin step family",
        ];
        NOT_NAMES
            .split_whitespace()
            .chain(relations.iter().flat_map(|r| r.split(['|', ' ', '\n'])))
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .collect()
    })
}

fn always(_: &str, _: usize, _: usize) -> bool {
    true
}

fn numbers(s: &str) -> Vec<u32> {
    s.split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn month_day_ok(m: u32, d: u32) -> bool {
    (1..=12).contains(&m) && (1..=31).contains(&d)
}

/// No digit, slash or period glued to either side, no percent after (`1/2/3`, `3.5/10`,
/// `5/40%` are not dates).
fn isolated(text: &str, s: usize, e: usize) -> bool {
    let b = text.as_bytes();
    let bad = |c: u8| c.is_ascii_digit() || c == b'/' || c == b'.';
    let before = s == 0 || !bad(b[s - 1]);
    let after = e >= b.len() || !(b[e].is_ascii_digit() || b[e] == b'/' || b[e] == b'%');
    before && after
}

/// The at most `n` bytes of `text` before byte `s`, lower-cased (cut at a character
/// boundary): a bounded look back, so a check costs the same anywhere in a long note.
fn tail_lower(text: &str, s: usize, n: usize) -> String {
    let mut start = s.saturating_sub(n);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..s].to_lowercase()
}

/// The at most `n` first characters of `text`, lower-cased: a bounded look ahead (lower-casing
/// the whole rest of the note for every year made detection quadratic in its length).
fn head_lower(text: &str, n: usize) -> String {
    let end = text.char_indices().nth(n).map_or(text.len(), |(i, _)| i);
    text[..end].to_lowercase()
}

/// Characters a year's check reads after it: enough for the longest unit ("breath").
const UNIT_CHARS: usize = 8;

/// Up to `n` lower-case words before `s` and after `e` (letters, digits and `/`).
fn context_words(text: &str, s: usize, e: usize, n: usize) -> (Vec<String>, Vec<String>) {
    let split = |t: &str| -> Vec<String> {
        t.split(|c: char| !(c.is_alphanumeric() || c == '/' || c == '%'))
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let mut end = (e + 30).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut before = split(&tail_lower(text, s, 40));
    before.reverse();
    before.truncate(n);
    let mut after = split(&text[e..end]);
    after.truncate(n);
    (before, after)
}

/// `m/d` in a ventilator setting ("PSV 10/5", "cpap 5/5 40%"), a cardiac output pair
/// ("co/ci 5/2.7") or a pain score ("c/o 3/10 pain") is not a date.
fn setting_or_score(text: &str, s: usize, e: usize) -> bool {
    const VENT: [&str; 22] = [
        "psv",
        "ps",
        "pv",
        "cpap",
        "bipap",
        "bi",
        "peep",
        "vent",
        "simv",
        "imv",
        "flowby",
        "flow",
        "co/ci",
        "co/ci/svr",
        "ps/",
        "/ps",
        "imv/",
        "trial",
        "ventilation",
        "mask",
        "cpap/ps",
        "settings",
    ];
    const AFTER: [&str; 9] = [
        "peep", "psv", "ps", "cpap", "bipap", "fio2", "%", "pressure", "support",
    ];
    const PAIN: [&str; 7] = ["pain", "cp", "c/o", "angina", "discomfort", "scale", "ha"];
    let (before, after) = context_words(text, s, e, 3);
    let has = |words: &[String], set: &[&str]| words.iter().any(|w| set.contains(&w.as_str()));
    // "co/ci 5/2.7": a cardiac index, not "11/21.93".
    let small = numbers(&text[s..e]).last().is_some_and(|&d| d < 13);
    let glued_decimal = small
        && text[e..].starts_with('.')
        && text[e + 1..].starts_with(|c: char| c.is_ascii_digit());
    let out_of_ten = text[s..e].ends_with("/10");
    has(&before, &VENT)
        || after
            .first()
            .is_some_and(|w| AFTER.contains(&w.as_str()) || w.ends_with('%'))
        || glued_decimal
        || (out_of_ten && (has(&before, &PAIN) || has(&after[..after.len().min(2)], &PAIN)))
}

fn check_md(text: &str, s: usize, e: usize) -> bool {
    let n = numbers(&text[s..e]);
    let fraction = n.len() == 2 && n[0] < n[1] && n[1] <= 4; // 1/2, 2/3, 3/4
    n.len() == 2
        && !fraction
        && month_day_ok(n[0], n[1])
        && isolated(text, s, e)
        && !setting_or_score(text, s, e)
}

fn check_mdy(text: &str, s: usize, e: usize) -> bool {
    let n = numbers(&text[s..e]);
    n.len() == 3 && month_day_ok(n[0], n[1]) && isolated(text, s, e)
}

/// `8/87`: a month and a two-digit year that cannot be a day (32-99).
fn check_my(text: &str, s: usize, e: usize) -> bool {
    let n = numbers(&text[s..e]);
    n.len() == 2 && (1..=12).contains(&n[0]) && n[1] >= 32 && isolated(text, s, e)
}

/// A year after a medical event ("CABG 81", "MI 1992"): not glued to more numbers, not a
/// quantity, and not a two-digit calcium level ("Ca 10").
fn check_event_year(text: &str, s: usize, e: usize) -> bool {
    let before = tail_lower(text, s, 8);
    let calcium = e - s == 2 && before.trim_end_matches(['\'', ' ', '\t']).ends_with("ca");
    // check_year rules out decimals ("MI 92.5") and units.
    isolated(text, s, e) && !calcium && check_year(text, s, e)
}

fn check_ymd(text: &str, s: usize, e: usize) -> bool {
    let n = numbers(&text[s..e]);
    n.len() == 3 && month_day_ok(n[1], n[2])
}

fn check_day(text: &str, s: usize, e: usize) -> bool {
    numbers(&text[s..e])
        .first()
        .is_some_and(|&d| (1..=31).contains(&d))
}

/// A year: not a military time on the hour (`in 1900` is 7 pm more often than 1900), not a
/// quantity (`in 20 min`, `in 60's`, `in 72.5`); a period after it may end the sentence.
fn check_year(text: &str, s: usize, e: usize) -> bool {
    let digits: String = text[s..e].chars().filter(char::is_ascii_digit).collect();
    if digits.len() == 4 && digits.ends_with("00") {
        return false;
    }
    let rest = text[e..].trim_start_matches('\'');
    let next = head_lower(rest.trim_start(), UNIT_CHARS);
    let mut chars = rest.chars();
    let glued = chars.next().is_some_and(|c| {
        c.is_alphanumeric()
            || "%/".contains(c)
            || (c == '.' && chars.next().is_some_and(|d| d.is_ascii_digit()))
    });
    const UNITS: [&str; 16] = [
        "min", "mg", "mcg", "cc", "ml", "hr", "hour", "sec", "unit", "meq", "mm", "%", "l ",
        "liter", "breath", "day",
    ];
    !glued && !rest.starts_with('s') && !UNITS.iter().any(|u| next.starts_with(u))
}

fn check_ip(text: &str, s: usize, e: usize) -> bool {
    let n = numbers(&text[s..e]);
    n.len() == 4 && n.iter().all(|&x| x <= 255) && isolated(text, s, e)
}

fn check_name(text: &str, s: usize, e: usize) -> bool {
    let w = text[s..e].trim_end_matches('.').to_lowercase();
    !not_names().contains(w.as_str()) && w.chars().any(char::is_alphabetic)
}

/// A name after a title or relation word: not across a sentence end ("Dr. Vasquez. Lungs"
/// ends at the period; "Dr. J. Chang" does not), and not after "NP" meaning nasal prongs
/// ("2L NP sats").
fn check_name_after(text: &str, s: usize, e: usize) -> bool {
    // An initial with its period after a title ("Mr. S. remained").
    let initial = e - s == 1
        && text[s..e].chars().all(|c| c.is_ascii_uppercase())
        && text[e..].starts_with('.');
    let tail = tail_lower(text, s, 40);
    let before = tail.trim_end_matches([' ', '\t']);
    if let Some(head) = before.strip_suffix('.') {
        let word: String = head
            .chars()
            .rev()
            .take_while(|c| c.is_alphabetic() || *c == '\'')
            .collect();
        let word: String = word.chars().rev().collect();
        let title = ["dr", "drs", "mr", "mrs", "ms", "st", "np"].contains(&word.as_str());
        if word.chars().count() > 1 && !title {
            return false;
        }
    }
    if let Some(head) = before.trim_end_matches('.').strip_suffix("np") {
        let head = head.trim_end();
        let litres = head
            .strip_suffix('l')
            .is_some_and(|h| h.trim_end().ends_with(|c: char| c.is_ascii_digit()));
        if litres || head.ends_with("hour") || head.ends_with("on") {
            return false;
        }
    }
    initial || check_name(text, s, e)
}

/// A place word: not a function or clinical word, not a care-level word ("the ICU hospital").
fn check_place(text: &str, s: usize, e: usize) -> bool {
    let w = text[s..e].trim_end_matches('.').to_lowercase();
    // Care words and verbs that come before "rehab", "hospital"... ("go to rehab", "cardiac
    // rehab", "screened for rehab").
    const NOT_PLACES: &str = "general local outside community state area her his their an \
        cardiac pulmonary acute go going went admitted admit transfer transferred screened \
        screening rescreened re-screened evening morning tolerating discharged discharge dc \
        awaiting await begin continue cont con't homeless shelter husband wife past evaluate eval \
        evaluated leave possible poss start early completed prev previous nursing scheduled \
        house require requires required the a c t for inpatient outpatient rehab hospital \
        anxiously frequently occlusion beigng geri psych psychiatric vna";
    // "lives in DC": the capitals tell the place from "d/c" (discharge).
    if &text[s..e] == "DC" {
        return tail_lower(text, s, 8).trim_end().ends_with(" in");
    }
    let is_prefix = ["st", "saint", "mt", "mount"].contains(&w.as_str());
    is_prefix || (!NOT_PLACES.split_whitespace().any(|n| n == w) && check_name(text, s, e))
}

/// Words that come before or after an organisation word without naming it: titles, kinds
/// of school or service, subjects ("Medical School", "University of Medicine", "retired from
/// the Army").
const NOT_ORG_NAMES: &str = "dr doctor doctors drs mr mrs ms miss professor prof high middle \
    elementary grade grad graduate medical nursing law school work job army navy military \
    marines marine police fire department force forces air national federal county city town \
    post american medicine pharmacy dentistry engineering business education science sciences \
    arts art music technology surgeons physicians health public private catholic";

/// A word of an organisation's name: a place word ([`check_place`]) that is not a kind of
/// organisation ([`ORGS`]: "works at Towson University" ends before "University"), a title, a
/// kind of school or service or a subject ([`NOT_ORG_NAMES`]).
fn check_org_name(text: &str, s: usize, e: usize) -> bool {
    let w = text[s..e].trim_end_matches('.').to_lowercase();
    let kind = ORGS.split(['|', ' ', '\n']).any(|n| n.trim() == w);
    !kind && !NOT_ORG_NAMES.split_whitespace().any(|n| n == w) && check_place(text, s, e)
}

/// A year of two or four digits after a season: four digits or `'96` as any year, two bare
/// digits only from 32 ("fall 10 feet" is a fall), never a quantity.
fn check_season_year(text: &str, s: usize, e: usize) -> bool {
    let n = numbers(&text[s..e]);
    let apostrophe = text[..s].ends_with('\'');
    let ok = match (e - s, n.first()) {
        (4, Some(_)) => true,
        (2, Some(&y)) => apostrophe || y >= 32,
        _ => false,
    };
    ok && check_year(text, s, e)
}

/// The end of a range of years ("1996-98"): later than the start's last two digits.
fn check_year_range(text: &str, s: usize, e: usize) -> bool {
    let start = numbers(&tail_lower(text, s, 12)).last().map(|n| n % 100);
    let (Some(a), Some(&b)) = (start, numbers(&text[s..e]).first()) else {
        return false;
    };
    b > a && check_year(text, s, e)
}

fn rule(name: &'static str, label: &'static str, score: f32, re: &str, check: Check) -> Rule {
    Rule {
        name,
        label,
        score,
        re: Regex::new(re).unwrap_or_else(|e| panic!("rule {name}: {e}")),
        check,
        order: if label == "NAME" {
            Order::Forward
        } else {
            Order::Each
        },
    }
}

impl Rule {
    /// The rule with its groups checked in `order` (its label's order otherwise).
    fn ordered(self, order: Order) -> Rule {
        Rule { order, ..self }
    }
}

const MONTHS: &str = "jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|june?|july?|aug(?:ust)?|\
    sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?";
// The `-in-law` forms come first: alternation takes the first that matches, and "son" would
// leave "-in-law" to be read as a name.
const RELATIONS: &str = "son-in-law|daughter-in-law|mother-in-law|father-in-law|sister-in-law|\
    brother-in-law|ex-wife|ex-husband|wife|husband|son|sons|daughter|daughters|dtr|sister|\
    sisters|brother|brothers|mother|father|mom|dad|mum|niece|nieces|nephew|nephews|aunt|uncle|\
    grandson|grandsons|granddaughter|granddaughters|grandaughter|grand daughter|grandchild|\
    grandmother|grandfather|grandma|grandpa|stepmother|stepfather|stepson|stepdaughter|\
    stepsister|stepbrother|friend|girlfriend|boyfriend|proxy|hcp|neighbor|neighbour|cousin|\
    fiance|fiancee|partner|spouse|sibling|caregiver|guardian|godmother|godfather|roommate|\
    companion";
// Relation words for more than one person, before a list of names ("daughters Ann and Jo").
const RELATION_GROUPS: &str = "sons|daughters|sisters|brothers|children|kids|grandchildren|\
    grandsons|granddaughters|nieces|nephews|parents|siblings|cousins|friends|stepchildren";
// Words that end an organisation's name ("Towson University", "Acme Corp."); not "Inc",
// which notes write for "increased".
const ORGS: &str = "university|univ|college|institute|academy|seminary|church|synagogue|mosque|\
    corporation|corp|company|llc|ltd|associates|foundation|airlines|hospice|infirmary|\
    sanitarium|penitentiary|prison|correctional";
// A capitalised word (a name in a note that is not all lower case).
const CAP: &str = r"\p{Lu}[\p{L}\-]*(?:'\p{L}{2,}[\p{L}\-]*)?";
// A capitalised word that is not all capitals: in an all-caps note every word is capitalised.
const TITLE_CASE: &str = r"\p{Lu}\p{Ll}[\p{L}\-]*(?:'\p{L}{2,}[\p{L}\-]*)?";
// Events a past medical history dates with a year ("CABG 81", "MI '92", "CVA 2004").
const EVENTS: &str = "mi|ami|imi|nstemi|stemi|cva|tia|cabg|ptca|pci|stent|stents|avr|mvr|tvr|\
    ppm|aicd|icd|dx|dx'd|diagnosed|chf|dvt|ca|cancer|surgery|repair|chole|cholecystectomy|tah|\
    bso|hysterectomy|mastectomy|lumpectomy|nephrectomy|thr|tkr|orif|fx|amputation|bka|aka|redo|\
    xrt|chemo|transplant|appy|appendectomy|colectomy|laminectomy|craniotomy|pacemaker|pacer|\
    angioplasty|bypass|stroke|ablation|replacement|resection|biopsy|radiation|mva|hospitalization|\
    hospitalized|accident|injury|intubation|tracheostomy|catheterization|arrest|pneumonia|\
    overdose|gsw";
// Month names that are dates after a day number; "mar" (medication record), "dec"
// (decrease) and "may" are too often words.
const DAY_MONTHS: &str = "jan(?:uary)?|feb(?:ruary)?|march|apr(?:il)?|june?|july?|aug(?:ust)?|\
    sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|december";
// A name word: an apostrophe only inside a name ("O'Rourke"), not a possessive ("Smith's").
const NAME: &str = r"[\p{L}][\p{L}\-]*(?:'\p{L}{2,}[\p{L}\-]*)?";

fn rules() -> &'static [Rule] {
    static RULES: OnceLock<Vec<Rule>> = OnceLock::new();
    RULES.get_or_init(|| {
        // A title takes a period or spaces before the name ("MS:" is mental status); a
        // relation word may take punctuation ("daughter, Emily"). At most two words follow.
        let word_after = |triggers: &str, gap: &str| {
            format!(
                r"(?i)\b(?:{triggers})\b(?:{gap})(?:is\s+|named\s+)?(?P<phi>{NAME})(?:[\s.]+(?P<phi2>{NAME}))?"
            )
        };
        vec![
            // Dates. Times (10:30, 1030, 7a-7p) have no slash and no month: never matched.
            rule("date_mdy", "DATE", 0.95, r"\b\d{1,2}[/-]\d{1,2}[/-](?:\d{4}|\d{2})\b", check_mdy),
            rule("date_ymd", "DATE", 0.95, r"\b(?:1[89]|2[01])\d{2}-\d{1,2}-\d{1,2}\b", check_ymd),
            // A letter may be glued before a full date ("on10/14/82").
            rule(
                "date_mdy_glued",
                "DATE",
                0.9,
                r"(?i)[a-z](?P<phi>\d{1,2}[/-]\d{1,2}[/-](?:\d{4}|\d{2}))\b",
                check_mdy,
            ),
            rule("date_md", "DATE", 0.7, r"\b\d{1,2}/\d{1,2}\b", check_md),
            rule("date_my2", "DATE", 0.75, r"\b\d{1,2}/\d{2}\b", check_my),
            rule("date_my", "DATE", 0.8, r"\b\d{1,2}/(?:19|20)\d{2}\b", always),
            rule(
                "date_month",
                "DATE",
                0.8,
                &format!(
                    r"(?i)\b(?:{MONTHS})\b\.?(?:\s*\d{{1,2}}(?:st|nd|rd|th)?\b)?(?:,?\s*(?:(?:19|20)\d{{2}}|'\d{{2}})\b)?"
                ),
                |t, s, e| {
                    let w = t[s..e].to_lowercase();
                    // "dec" is mostly "decrease", "mar" "MAR" (medication record), "may" a verb:
                    // alone they are not dates.
                    let bare = !w.contains(|c: char| c.is_ascii_digit());
                    !(bare && ["dec", "dec.", "mar", "mar.", "jan"].contains(&w.as_str()))
                },
            ),
            rule(
                "date_may",
                "DATE",
                0.8,
                r"(?i)\bmay\.?\s*\d{1,2}(?:st|nd|rd|th)?\b(?:,?\s*(?:(?:19|20)\d{2}))?",
                always,
            ),
            rule(
                "date_ordinal",
                "DATE",
                0.6,
                r"(?i)\b(?:on|the|since|until|by|from)\s+(?:the\s+)?(?P<phi>\d{1,2}(?:st|nd|rd|th))\b",
                check_day,
            ),
            rule(
                "date_year",
                "DATE",
                0.7,
                r"(?i)(?:\b(?:in|since|year|yr)\s+|\B')(?P<phi>(?:19|20)?\d{2})\b|\b(?P<phi2>\d{2})'(?:[^s\w]|$)",
                check_year,
            ),
            rule(
                "date_event_year",
                "DATE",
                0.75,
                &format!(
                    r"(?i)\b(?:{EVENTS})\s+(?:in\s+|of\s+)?'?(?P<phi>(?:19|20)\d{{2}}|\d{{2}})\b'?(?:\s+and\s+'?(?P<phi2>\d{{2}})\b)?"
                ),
                check_event_year,
            ),
            // 1960-1999 cannot be a time (the minutes would be 60 or more).
            rule("date_year4", "DATE", 0.6, r"\b19[6-9]\d\b", |t, s, e| {
                isolated(t, s, e) && check_year(t, s, e)
            }),
            rule(
                "date_day_month",
                "DATE",
                0.75,
                &format!(
                    r"(?i)\b(?:(?P<phi>\d{{1,2}})\s*(?:-|->|to)\s*)?(?P<phi2>\d{{1,2}})(?:st|nd|rd|th)?\s*(?:of\s+)?(?:{DAY_MONTHS})\b"
                ),
                check_day,
            ),
            rule(
                "date_month_yy",
                "DATE",
                0.7,
                &format!(
                    r"(?i)\b(?:{MONTHS})\b\.?(?:\s*\d{{1,2}}(?:st|nd|rd|th)?)?,\s*(?P<phi>\d{{2}})\b"
                ),
                |t, _, e| !t[e..].starts_with([':', '.', '/', '%']) || t[e..].starts_with(". "),
            ),
            rule("date_decade", "DATE", 0.7, r"(?i)\b(?:19|20)\d0'?s\b", always),
            rule(
                "date_season_year",
                "DATE",
                0.7,
                r"(?i)\b(?:spring|summer|fall|autumn|winter|christmas|xmas|thanksgiving|easter)\s+(?:of\s+)?'?(?P<phi>(?:19|20)\d{2}|\d{2})\b",
                check_season_year,
            ),
            // The end of a range of years ("1996-98"); its start is a date_year4.
            rule(
                "date_year_range",
                "DATE",
                0.7,
                r"\b19[6-9]\d\s*(?:-|to)\s*'?(?P<phi>[6-9]\d)\b",
                check_year_range,
            ),
            // Contact numbers.
            rule(
                "phone",
                "PHONE",
                0.9,
                r"(?:\(\d{3}\)\s*|\b\d{3}[\s.\-]?)\d{3}[\s.\-]?\d{4}\b|\(\d{6}-\d{4}\)|\(\d{3} \d{3} \d{4,5}\)",
                always,
            ),
            rule(
                "pager",
                "PHONE",
                0.8,
                r"(?i)\b(?:pager|beeper|page|pgr|bpr|beep|phone|tel|cell|ext|x)\b\.?\s*(?:#|no\.?|number)?\s*:?\s*(?P<phi>\d{4,6})\b",
                always,
            ),
            rule("email", "EMAIL", 0.99, r"\b[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+\b", always),
            rule("url", "URL", 0.95, r"(?i)\b(?:https?://|www\.)[^\s<>()]+", always),
            rule("ip", "IP", 0.9, r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b", check_ip),
            rule("ssn", "SSN", 0.95, r"\b\d{3}-\d{2}-\d{4}\b", always),
            rule("zip", "ZIP", 0.8, r"\b[A-Z]{2},?\s+(?P<phi>\d{5}(?:-\d{4})?)\b", always),
            // Ages over 89.
            rule(
                "age",
                "AGE",
                0.9,
                r"(?i)\b(?P<phi>9\d|1[0-2]\d)\s*-?\s*(?:yo\b|y/o|y\.o\.?|yrs?\.?\s*old|years?[\s\-]*old|yr[\s\-]old)",
                always,
            ),
            rule(
                "age_word",
                "AGE",
                0.85,
                r"(?i)\b(?:age|aged)\s*:?\s*(?P<phi>9\d|1[0-2]\d)\b",
                always,
            ),
            // Identifier numbers after their context words.
            rule(
                "id",
                "ID",
                0.85,
                r"(?i)(?:\b(?:mrn|mr|medical\s+record|record|unit|acct|account|ref|reference|policy|id|case|accession|serial|job|clip)\b\s*(?:no\.?|number|num|#)?|#)\s*[:#]?\s*(?P<phi>[a-z]{0,3}\d[\w\-]+)\b",
                |_, s, e| e - s >= 4,
            ),
            // Places: the words before a facility word, and after "lives in" and the like.
            rule(
                "location_facility",
                "LOCATION",
                0.75,
                &format!(
                    r"(?i)\b(?:(?P<phi>st\.?|saint|mt\.?|mount)\s+)?(?P<phi2>{NAME})\s+(?:(?P<phi3>{NAME})\s+)?(?:hospital|hosp|regional|memorial|campus|medical\s+center|med\s+ctr|rehab|rehabilitation|nursing\s+home|clinic|manor|healthcare|health\s+center|house)\b"
                ),
                check_place,
            ),
            // A house number and a street ("19 Clover St.").
            rule(
                "location_street",
                "LOCATION",
                0.7,
                r"\b(?P<phi>\d{1,5})\s+(?P<phi2>\p{Lu}\p{Ll}+)(?:\s+(?P<phi3>\p{Lu}\p{Ll}+))?\s+(?:St|Street|Ave|Avenue|Rd|Road|Blvd|Lane|Ln|Drive|Court|Ct|Way|Terrace)\b",
                |t, s, e| t[s..e].chars().all(|c| c.is_ascii_digit()) || check_place(t, s, e),
            ),
            rule(
                "location_lives",
                "LOCATION",
                0.7,
                &format!(
                    r"(?i)\b(?:lives|living|resides|residing|moved|home|vacation|vacationing|visiting|from\s+home)\s+(?:in|at|to|near)\s+(?P<phi>{NAME})(?:[\s,]+(?P<phi2>{NAME}))?"
                ),
                check_place,
            ),
            // Organisations: capitalised words before an organisation word ("Towson
            // University"), after "University of", and after working or studying at.
            rule(
                "location_org",
                "LOCATION",
                0.7,
                &format!(
                    r"(?:(?P<phi>{CAP})\s+)?(?:(?P<phi2>{CAP})\s+)?(?P<phi3>{CAP})\s+(?i:{ORGS})\b"
                ),
                check_org_name,
            )
            .ordered(Order::Backward),
            rule(
                "location_org_of",
                "LOCATION",
                0.7,
                &format!(
                    r"(?i:\b(?:university|univ|college|institute)\.?\s+of\s+)(?P<phi>{CAP})(?:\s+(?P<phi2>{CAP}))?"
                ),
                check_org_name,
            )
            .ordered(Order::Forward),
            rule(
                "location_employer",
                "LOCATION",
                0.65,
                &format!(
                    r"(?i:\b(?:works?|worked|working|employed|employee|retired|job|student|studies|studying|attends|attended|graduated|volunteers?|volunteered|teaches|taught)\s+(?:at|for|from|by)\s+(?:the\s+)?)(?P<phi>{CAP})(?:\s+(?P<phi2>{CAP}))?(?:\s+(?P<phi3>{CAP}))?"
                ),
                check_org_name,
            )
            .ordered(Order::Forward),
            // Names after a title, a relation word, or before a credential.
            rule(
                "name_title",
                "NAME",
                0.85,
                &word_after(
                    r"dr|drs|dr's|doctor|doctors|mr|mrs|ms|miss|mister|np|attending",
                    r"\.?[ \t]+|\.",
                ),
                check_name_after,
            ),
            // The second of two names after a title ("Drs Joseph and Robbinson").
            rule(
                "name_pair",
                "NAME",
                0.75,
                &format!(
                    r"(?i)\b(?:dr|drs|dr's|doctors)\b\.?\s*{NAME}\s*(?:,|and|&)\s*(?:dr\.?\s*)?(?P<phi>{NAME})"
                ),
                check_name,
            ),
            rule(
                "name_relation",
                "NAME",
                0.75,
                &word_after(RELATIONS, r"[\s,:;'()\-]*"),
                check_name_after,
            ),
            // "wife's name is Mary", "daughters' names are Ann and Jo".
            rule(
                "name_relation_named",
                "NAME",
                0.75,
                &format!(
                    r"(?i)\b(?:{RELATIONS}|{RELATION_GROUPS})(?:'s|s')?\s+(?:first\s+)?names?\s*(?:is|are|:)\s*(?P<phi>{NAME})(?:\s+(?:and\s+)?(?P<phi2>{NAME}))?"
                ),
                check_name,
            ),
            // The names after the first in a list after a plural relation ("daughters Ann
            // and Jo"; name_relation finds "Ann").
            rule(
                "name_relation_list",
                "NAME",
                0.7,
                &format!(
                    r"(?i)\b(?:{RELATION_GROUPS})\b[\s,:;()\-]*{NAME}{SEP}(?P<phi>{NAME})(?:{SEP}(?P<phi2>{NAME}))?(?:{SEP}(?P<phi3>{NAME}))?",
                    SEP = r"\s*(?:,\s*(?:and\s+)?|&\s*|\s+and\s+)"
                ),
                check_name,
            ),
            // A name in title case before its relation in brackets or after a comma ("Mary
            // (wife)", "John Lee, pt's son"); not in all-caps notes ("THURS, WIFE IN").
            rule(
                "name_before_relation",
                "NAME",
                0.7,
                &format!(
                    r"(?:(?P<phi>{TITLE_CASE})\s+)?(?P<phi2>{TITLE_CASE})\s*(?:\(\s*|,\s*)(?i:(?:the\s+)?(?:pt'?s|patient'?s|his|her|their)\s+)?(?i:{RELATIONS})\b"
                ),
                check_name,
            )
            .ordered(Order::Backward),
            rule(
                "name_credential",
                "NAME",
                0.8,
                &format!(
                    r"(?i)(?:^|\n|[.;:\-]\s+|\s\s)(?P<phi>{NAME})(?:\s+(?P<phi2>{NAME}))?(?:\.?\s*(?P<phi3>{NAME}))?(?:,\s*|\s+)(?:rn|rrt|lpn|bsn|sn|np|msw|lcsw|pct|md)\b"
                ),
                check_name,
            ),
        ]
    })
}

/// Every rule's detections in `text`, sorted by (start, end), with code-point offsets.
///
/// The rules run on the text without its default-ignorable code points (a soft hyphen inside
/// "Robin\u{AD}son" hides nothing from them); offsets point into `text` itself.
pub fn detect(text: &str) -> Vec<Detection> {
    let mut out = match crate::ignorable::Stripped::new(text) {
        None => matches(text),
        Some(stripped) => {
            let mut found = matches(&stripped.text);
            for (s, e, _) in &mut found {
                (*s, *e) = (stripped.start(*s), stripped.end(*e));
            }
            found
        }
    };
    out.sort_by_key(|&(s, e, r)| (s, e, r.name));
    // Byte -> code-point offsets in one pass over the sorted boundaries.
    let mut marks: Vec<usize> = out.iter().flat_map(|&(s, e, _)| [s, e]).collect();
    marks.sort_unstable();
    marks.dedup();
    let mut to_char = hashbrown::HashMap::with_capacity(marks.len());
    let (mut byte, mut chars) = (0usize, 0usize);
    for m in marks {
        chars += text[byte..m].chars().count();
        byte = m;
        to_char.insert(m, chars);
    }
    out.into_iter()
        .map(|(s, e, r)| Detection {
            start: s,
            end: e,
            char_start: to_char[&s],
            char_end: to_char[&e],
            label: r.label,
            rule: r.name,
            score: r.score,
        })
        .collect()
}

/// Every rule's matches in `text` as byte offsets, in no particular order.
fn matches(text: &str) -> Vec<(usize, usize, &'static Rule)> {
    let mut out = Vec::new();
    for r in rules() {
        for caps in r.re.captures_iter(text) {
            let mut groups = ["phi", "phi2", "phi3"];
            if r.order == Order::Backward {
                groups.reverse();
            }
            let mut any = false;
            for g in groups {
                if let Some(m) = caps.name(g) {
                    any = true;
                    if (r.check)(text, m.start(), m.end()) {
                        out.push((m.start(), m.end(), r));
                    } else if r.order != Order::Each {
                        break; // a word that is not a name ends the name
                    }
                }
            }
            if !any {
                let m = caps.get(0).expect("group 0 always matches");
                if (r.check)(text, m.start(), m.end()) {
                    out.push((m.start(), m.end(), r));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<(String, &'static str)> {
        detect(text)
            .into_iter()
            .map(|d| (text[d.start..d.end].to_string(), d.label))
            .collect()
    }

    fn has(text: &str, what: &str, label: &str) -> bool {
        found(text).iter().any(|(w, l)| w == what && *l == label)
    }

    #[test]
    fn ignorable_code_points_hide_nothing() {
        let text = "Seen by Dr. Robin\u{AD}son on 7/\u{200B}22/97 with \u{200B}Zoë";
        let got: Vec<_> = detect(text)
            .into_iter()
            .map(|d| {
                (
                    text[d.start..d.end].to_string(),
                    d.label,
                    d.char_start,
                    d.char_end,
                )
            })
            .collect();
        assert!(
            got.contains(&("Robin\u{AD}son".to_string(), "NAME", 12, 21)),
            "{got:?}"
        );
        assert!(
            got.contains(&("7/\u{200B}22/97".to_string(), "DATE", 25, 33)),
            "{got:?}"
        );
    }

    #[test]
    fn dates_in_clinical_forms() {
        for (t, d) in [
            ("seen 7/22 for", "7/22"),
            ("on 7/22/97 and", "7/22/97"),
            ("dated 2019-03-04.", "2019-03-04"),
            ("since nov. 2016 she", "nov. 2016"),
            ("cabg '92 redo", "92"),
            ("MI in 1994, then", "1994"),
            ("back on the 14th", "14th"),
            ("Seen in July by", "July"),
            ("4-12-95 was", "4-12-95"),
        ] {
            assert!(has(t, d, "DATE"), "{t}: {:?}", found(t));
        }
    }

    #[test]
    fn times_ratios_and_doses_are_not_dates() {
        for t in [
            "at 10:30 today",
            "from 1900 - 0700",
            "7a-7p shift",
            "BP 120/80",
            "pain 3.5/10",
            "dec BS",
            "MAR reviewed",
            "may need",
            "1/2/3/4",
        ] {
            assert!(
                found(t).iter().all(|(_, l)| *l != "DATE"),
                "{t}: {:?}",
                found(t)
            );
        }
    }

    #[test]
    fn past_history_years_and_month_years() {
        for (t, d) in [
            ("PMH: CABG 81, Redo CABG 84, MVR", "81"),
            ("PMH: CABG 81, Redo CABG 84, MVR", "84"),
            ("S/P MI 1992; LCX PTCA", "1992"),
            ("PMHX CVA in 94 and 00 affected", "00"),
            ("CVA 74'. CHOLECYSTECTOMY 77'.", "74"),
            ("MI in '81 and redo in '84.", "84"),
            ("RENAL CELL CA 1977,S/P", "1977"),
            ("stent to RCA 12/82. Reoccluded", "12/82"),
            ("labs on10/14/82> to hct", "10/14/82"),
            ("Nursing note\n21 Apr, 21 0700", "21"),
            ("1->2 nov, 96", "1"),
            ("1->2 nov, 96", "96"),
        ] {
            assert!(has(t, d, "DATE"), "{t}: {:?}", found(t));
        }
    }

    #[test]
    fn settings_scores_and_levels_are_not_dates() {
        for t in [
            "placed on PSV 10/5 overnight",
            "cpap 5/5 40% tol well",
            "remains on ps 12/5 peep",
            "co/ci 5/2.7 svr 900",
            "c/o 3/10 back pain",
            "vent ac 600x12/5/40% peep",
            "psv 12/5/40%. rsbi",
            "Ca 10 this am",
            "from 1900 - 0700",
            "0700->1930 shift",
        ] {
            assert!(
                found(t).iter().all(|(_, l)| *l != "DATE"),
                "{t}: {:?}",
                found(t)
            );
        }
        // The same numbers are dates outside those contexts.
        assert!(has("PICC placed 11/17, art line", "11/17", "DATE"));
        assert!(has("admitted 11/21.93 note", "11/21", "DATE"));
    }

    #[test]
    fn contact_numbers_and_ids() {
        assert!(has("call 410-322-1419 now", "410-322-1419", "PHONE"));
        assert!(has("call (617) 555-1234", "(617) 555-1234", "PHONE"));
        assert!(has("Pager 83554.", "83554", "PHONE"));
        assert!(has(
            "mail jo.doe@example.org.",
            "jo.doe@example.org",
            "EMAIL"
        ));
        assert!(has("see www.example.com/x now", "www.example.com/x", "URL"));
        assert!(has("ip 10.0.12.255 x", "10.0.12.255", "IP"));
        assert!(!has("ip 10.0.12.256 x", "10.0.12.256", "IP"));
        assert!(has("ssn 123-45-6789", "123-45-6789", "SSN"));
        assert!(has("Boston, MA 02115", "02115", "ZIP"));
        assert!(has("MRN: 12345678", "12345678", "ID"));
        assert!(has("policy #rg17,at", "rg17", "ID"));
        assert!(has("(ref # 8336652)", "8336652", "ID"));
        assert!(!has("gave 40 mg", "40", "ID"));
    }

    #[test]
    fn ages_over_89_only() {
        assert!(has("a 98 yo woman", "98", "AGE"));
        assert!(has("is 91 years old", "91", "AGE"));
        assert!(has("Age: 102.", "102", "AGE"));
        assert!(!has("a 58 yo woman", "58", "AGE"));
    }

    #[test]
    fn names_after_titles_relations_and_before_credentials() {
        assert!(has("Dr. Mesite aware", "Mesite", "NAME"));
        assert!(!has("Dr. Mesite aware", "aware", "NAME"));
        assert!(has("per dr mary anderson.", "anderson", "NAME"));
        assert!(has("pt's son bill called", "bill", "NAME"));
        assert!(!has("pt's son bill called", "called", "NAME"));
        assert!(has("\nIlene Macdonald RN\n", "Ilene", "NAME"));
        assert!(has("\nIlene Macdonald RN\n", "Macdonald", "NAME"));
        assert!(!has("wife called and", "called", "NAME"));
        assert!(has("Emily Parker,RN\n", "Parker", "NAME"));
        assert!(has(
            "1720- Stord-Painter MD performed",
            "Stord-Painter",
            "NAME"
        ));
        assert!(has("DRS JOSEPH AND ROBBINSON AWARE", "ROBBINSON", "NAME"));
        assert!(has(
            "Dr. Griffin and Swackhamer aware",
            "Swackhamer",
            "NAME"
        ));
        assert!(has("WITH MS S. CARE", "S", "NAME"));
        // Not across a sentence end, not after nasal prongs.
        assert!(!has("per Dr. Vasquez. Milrinone gtt", "Milrinone", "NAME"));
        assert!(!has("On 4L NP sats are 96", "sats", "NAME"));
    }

    #[test]
    fn places_before_facility_words_and_after_lives_in() {
        assert!(has("went to St. Mary Hospital.", "Mary", "LOCATION"));
        assert!(has("FROM CALVERT HOSPITAL FOR", "CALVERT", "LOCATION"));
        assert!(has("pt lives in Rockville with", "Rockville", "LOCATION"));
        assert!(found("plan to go to rehab, cardiac rehab").is_empty());
        assert!(has("TAKEN TO LAUREL REGIONAL WHERE", "LAUREL", "LOCATION"));
        assert!(has("housing at 19 Clover St. in", "19", "LOCATION"));
        assert!(has("proxy who lives in DC.", "DC", "LOCATION"));
        assert!(!has("plan to dc in am", "dc", "LOCATION"));
        assert!(has(
            "son visited.(301 273 45166) both",
            "(301 273 45166)",
            "PHONE"
        ));
    }

    #[test]
    fn organisations_by_their_words_and_after_work_or_study() {
        assert!(has("a student at Towson University.", "Towson", "LOCATION"));
        assert!(has(
            "retired from Bethlehem Steel Corp in",
            "Bethlehem",
            "LOCATION"
        ));
        assert!(has(
            "retired from Bethlehem Steel Corp in",
            "Steel",
            "LOCATION"
        ));
        assert!(has(
            "went to the University of Maryland for",
            "Maryland",
            "LOCATION"
        ));
        assert!(has("Works for Verizon as", "Verizon", "LOCATION"));
        assert!(has("GRADUATED FROM LOYOLA COLLEGE", "LOYOLA", "LOCATION"));
        // Checked from the organisation word back: "At" ends the name.
        let got = found("Professor At Towson University");
        assert_eq!(got, vec![("Towson".to_string(), "LOCATION")]);
        // Kinds of school, subjects, titles and generic employers are not names.
        assert!(found("finished Medical School and Law School").is_empty());
        assert!(found("the University of Medicine and the State University").is_empty());
        let got = found("retired from the Army, works for Dr Smith");
        assert_eq!(got, vec![("Smith".to_string(), "NAME")]); // the title's name only
        assert!(found("works at home, student at night").is_empty());
    }

    #[test]
    fn relatives_named_listed_and_before_their_relation() {
        assert!(has("wife's name is Mary.", "Mary", "NAME"));
        assert!(has("daughters' names are Ann and Jo", "Jo", "NAME"));
        assert!(has("daughters Jane and Ann visited", "Jane", "NAME"));
        assert!(has("daughters Jane and Ann visited", "Ann", "NAME"));
        assert!(has("sons Bill, Tom, and Joe here", "Joe", "NAME"));
        assert!(has("Spoke With Mary Lee (wife) at", "Mary", "NAME"));
        assert!(has("Spoke With Mary Lee (wife) at", "Lee", "NAME"));
        assert!(!has("Spoke With Mary Lee (wife) at", "With", "NAME"));
        assert!(has("Called John, pt's son-in-law", "John", "NAME"));
        assert!(has("grandmother Rose called", "Rose", "NAME"));
        // A relation word is never a name: "-in-law", "wife and son", a list of relations.
        assert!(found("son-in-law at bedside").is_empty());
        assert!(found("Wife, son and daughters visited and left").is_empty());
        assert!(found("Family (wife and son) updated").is_empty());
        assert!(found("daughters visited and called").is_empty());
        assert!(found("PLACEMENT TOMORROW ,HUSBAND TO SIGN; Social - Son visited").is_empty());
        assert!(found("PROPOFOL INC TO 75, HR inc. to 120").is_empty());
    }

    #[test]
    fn two_digit_years_after_months_seasons_and_in_ranges() {
        // After a month, date_month takes the year with it.
        assert!(has("since Jan 98 on", "Jan 98", "DATE"));
        assert!(has("in November '05.", "November '05", "DATE"));
        assert!(has("fell in the summer of 96,", "96", "DATE"));
        assert!(has("Christmas 2004 with", "2004", "DATE"));
        assert!(!has("fall 10 feet from", "10", "DATE"));
        assert!(!has("winter 40 mg", "40", "DATE"));
        assert!(has("lived there 1996-98 then", "98", "DATE"));
        assert!(!has("from 1998-96", "96", "DATE"));
        assert!(has("s/p overdose 97, intubated", "97", "DATE"));
    }

    #[test]
    fn offsets_are_code_points() {
        let t = "é😀 seen 7/22 by Dr. Zoë";
        let chars: Vec<char> = t.chars().collect();
        for d in detect(t) {
            let got: String = chars[d.char_start..d.char_end].iter().collect();
            assert_eq!(got, &t[d.start..d.end]);
        }
        assert!(has(t, "Zoë", "NAME"));
    }

    #[test]
    fn checks_look_a_bounded_way_around() {
        // The look ahead and look back are bounded, whatever follows or precedes.
        let long = "Min ".repeat(10_000);
        assert_eq!(head_lower(&long, UNIT_CHARS), "min min ");
        assert_eq!(head_lower("é\u{130}x", 2), "é\u{130}".to_lowercase());
        assert_eq!(tail_lower(&long, long.len(), 5), " min ");
        // A year's check reads only what is near it: cutting the note a little after the
        // year changes nothing (the check once lower-cased the whole rest of the note).
        let text = "MI in 1992 and in 97 x. In 1990 min; since 2004 breaths, in 2011 ".repeat(50);
        let years = detect(&text);
        assert!(years.len() >= 200);
        for d in &years {
            let cut = (d.end + 2 + 4 * UNIT_CHARS).min(text.len());
            let (s, e) = (d.start, d.end);
            assert!(check_year(&text[..cut], s, e) == check_year(&text, s, e));
        }
    }

    #[test]
    fn empty_and_large_texts() {
        assert!(detect("").is_empty());
        let big = "Pt seen 7/22 by Dr. Smith at 10:30. ".repeat(100_000);
        assert_eq!(detect(&big).len(), 200_000);
    }
}
