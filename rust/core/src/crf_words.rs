//! A CRF's attributes built from word columns, without a string per word and attribute: the
//! `crf` recognizer's features (`phisieve.detect.recognizers.crf`) as a [`Feature`] template
//! over interned columns ([`Words`]).
//!
//! A feature's attribute at a position is its prefix followed by the values of its parts,
//! joined by `|`: each part is a column's value `offset` positions away in the same sequence
//! (`#` past its ends), possibly transformed ([`Transform`]). A null value (in the sequence)
//! is no attribute. This is the string concatenation that polars does in the recognizer's
//! reference features, where a null makes the whole string null.
//!
//! [`Crf::tag_words`] gives the same result as [`Crf::tag`] over the attribute strings
//! ([`Words::attributes`]), but formats and looks up each *distinct* value's attribute once
//! per call (a feature of two parts: each distinct pair), so tagging costs a few table reads
//! per position and feature.

use crate::crf::{sequence_starts, Crf, Exact, Summary};
use crate::error::{CoreError, Result};
use crate::text::StrCol;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, ArrowPrimitiveType, PrimitiveArray};
use arrow_schema::DataType;
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use std::fmt::Display;
use std::hash::Hash;
use unicode_general_category::{get_general_category, GeneralCategory as G};

/// No value: a null, or no attribute.
const NONE: u32 = u32::MAX;

/// What a feature's part does to a column's value before it joins the attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transform {
    /// The value itself.
    Identity,
    /// Its first `n` characters (code points); all of a shorter value.
    First(usize),
    /// Its last `n` characters; all of a shorter value.
    Last(usize),
    /// Its length in characters, at most `n`, in decimal.
    Len(usize),
    /// Its shape: each character as `X` (an upper-case letter, `Lu`), `x` (lower case,
    /// `Ll`), `d` (a number, `N*`) or `o` (anything else), runs of one class collapsed
    /// (`Xxxx` -> `Xx`, `12/03` -> `dod`).
    Shape,
}

impl Transform {
    /// A transform by name: `""` (the value), `first:N`, `last:N`, `len:N` or `shape`.
    pub fn parse(name: &str) -> Result<Self> {
        let number = |n: &str| {
            n.parse::<usize>()
                .map_err(|_| CoreError::InvalidArgument(format!("bad transform {name:?}")))
        };
        Ok(match name.split_once(':') {
            None if name.is_empty() => Self::Identity,
            None if name == "shape" => Self::Shape,
            Some(("first", n)) => Self::First(number(n)?),
            Some(("last", n)) => Self::Last(number(n)?),
            Some(("len", n)) => Self::Len(number(n)?),
            _ => {
                return Err(CoreError::InvalidArgument(format!(
                    "unknown transform {name:?}; expected '', first:N, last:N, len:N or shape"
                )))
            }
        })
    }

    /// `value` transformed, appended to `out`.
    pub fn apply(&self, value: &str, out: &mut String) {
        match *self {
            Self::Identity => out.push_str(value),
            Self::First(n) => out.extend(value.chars().take(n)),
            Self::Last(n) => {
                let skip = value.chars().count().saturating_sub(n);
                out.extend(value.chars().skip(skip));
            }
            Self::Len(n) => out.push_str(&value.chars().count().min(n).to_string()),
            Self::Shape => {
                let mut last = None;
                for c in value.chars() {
                    let class = shape_class(c);
                    if last != Some(class) {
                        out.push(class);
                        last = Some(class);
                    }
                }
            }
        }
    }
}

/// The class of a character in a word's shape ([`Transform::Shape`]).
#[inline]
fn shape_class(c: char) -> char {
    if c.is_ascii() {
        return match c {
            'A'..='Z' => 'X',
            'a'..='z' => 'x',
            '0'..='9' => 'd',
            _ => 'o',
        };
    }
    match get_general_category(c) {
        G::UppercaseLetter => 'X',
        G::LowercaseLetter => 'x',
        G::DecimalNumber | G::LetterNumber | G::OtherNumber => 'd',
        _ => 'o',
    }
}

/// One part of a feature: `column`'s value `offset` positions away, transformed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub column: String,
    pub transform: Transform,
    pub offset: i64,
}

/// A feature: its attribute is `prefix` and its parts' values joined by `|` (just `prefix`
/// for a feature of no parts, such as a bias). At most two parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    pub prefix: String,
    pub parts: Vec<Part>,
}

/// A column, interned: each row's value number (`NONE` for a null) and the distinct values.
struct Column {
    name: String,
    ids: Vec<u32>,
    values: Vec<String>,
}

/// Interns values of any hashable kind, numbering them in order of first appearance.
struct Interner<K> {
    index: FxHashMap<K, u32>,
    values: Vec<String>,
}

impl<K: Hash + Eq> Interner<K> {
    fn new() -> Self {
        Self {
            index: FxHashMap::default(),
            values: Vec::new(),
        }
    }

    fn id(&mut self, key: K, text: impl FnOnce() -> String) -> u32 {
        let values = &mut self.values;
        *self.index.entry(key).or_insert_with(|| {
            values.push(text());
            (values.len() - 1) as u32
        })
    }
}

fn intern_strings(col: StrCol<'_>, fill: Option<&str>) -> (Vec<u32>, Vec<String>) {
    let mut interner = Interner::new();
    // A value is often the one before (no span, a space before the word): no hash then.
    let mut last: Option<(&str, u32)> = None;
    let ids = (0..col.len())
        .map(|i| match col.get(i).or(fill) {
            Some(v) => match last {
                Some((w, id)) if w == v => id,
                _ => {
                    let id = interner.id(v, || v.to_string());
                    last = Some((v, id));
                    id
                }
            },
            None => NONE,
        })
        .collect();
    (ids, interner.values)
}

fn intern_primitive<T>(array: &PrimitiveArray<T>, fill: Option<&str>) -> (Vec<u32>, Vec<String>)
where
    T: ArrowPrimitiveType,
    T::Native: Hash + Eq + Display,
{
    let mut interner: Interner<Option<T::Native>> = Interner::new();
    let ids = (0..array.len())
        .map(|i| {
            if array.is_valid(i) {
                let v = array.value(i);
                interner.id(Some(v), || v.to_string())
            } else if let Some(f) = fill {
                interner.id(None, || f.to_string())
            } else {
                NONE
            }
        })
        .collect();
    (ids, interner.values)
}

/// The words of sequences (notes) as interned columns: what [`Crf::tag_words`] tags.
pub struct Words {
    columns: Vec<Column>,
    /// Where each sequence's positions start, and the end of the last (`sequences + 1`).
    seq_start: Vec<usize>,
}

impl Words {
    /// Interned `columns` (name, array, what stands for its nulls: `None` keeps them null),
    /// of one length, laid out as sequences of `per_sequence[s]` positions. Strings are taken
    /// as they are, booleans as `true`/`false`, integers in decimal (a column of type null
    /// is all nulls).
    pub fn new(
        columns: &[(String, ArrayRef, Option<String>)],
        per_sequence: &[i64],
    ) -> Result<Self> {
        let bad = |m: String| CoreError::InvalidArgument(m);
        let seq_start = sequence_starts(per_sequence)?;
        let at = *seq_start.last().expect("sequence_starts begins with 0");
        for (k, (name, array, _)) in columns.iter().enumerate() {
            if array.len() != at {
                return Err(bad(format!(
                    "column {name:?} has {} rows; the sequences have {at} positions",
                    array.len()
                )));
            }
            if columns[..k].iter().any(|(other, _, _)| other == name) {
                return Err(bad(format!("column {name:?} is given twice")));
            }
        }
        // The columns are interned in parallel.
        let out = columns
            .par_iter()
            .map(|(name, array, fill)| {
                let fill = fill.as_deref();
                let (ids, values) = match array.data_type() {
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                        intern_strings(StrCol::new(array, "word column")?, fill)
                    }
                    DataType::Boolean => {
                        let b = array.as_boolean();
                        let mut values = vec!["false".to_string(), "true".to_string()];
                        if let Some(f) = fill {
                            values.push(f.to_string());
                        }
                        let null = if fill.is_some() { 2 } else { NONE };
                        let ids = (0..b.len())
                            .map(|i| {
                                if b.is_valid(i) {
                                    b.value(i) as u32
                                } else {
                                    null
                                }
                            })
                            .collect();
                        (ids, values)
                    }
                    DataType::Null => match fill {
                        Some(f) => (vec![0; array.len()], vec![f.to_string()]),
                        None => (vec![NONE; array.len()], Vec::new()),
                    },
                    DataType::Int8 => intern_primitive(array.as_primitive::<Int8Type>(), fill),
                    DataType::Int16 => intern_primitive(array.as_primitive::<Int16Type>(), fill),
                    DataType::Int32 => intern_primitive(array.as_primitive::<Int32Type>(), fill),
                    DataType::Int64 => intern_primitive(array.as_primitive::<Int64Type>(), fill),
                    DataType::UInt8 => intern_primitive(array.as_primitive::<UInt8Type>(), fill),
                    DataType::UInt16 => intern_primitive(array.as_primitive::<UInt16Type>(), fill),
                    DataType::UInt32 => intern_primitive(array.as_primitive::<UInt32Type>(), fill),
                    DataType::UInt64 => intern_primitive(array.as_primitive::<UInt64Type>(), fill),
                    other => {
                        return Err(bad(format!(
                            "column {name:?} must be strings, booleans or integers, not {other}"
                        )))
                    }
                };
                Ok(Column {
                    name: name.clone(),
                    ids,
                    values,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            columns: out,
            seq_start,
        })
    }

    /// How many positions (words) there are.
    pub fn len(&self) -> usize {
        self.seq_start.last().copied().unwrap_or(0)
    }

    /// Whether there are no positions.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where each sequence's positions start, then the end of the last.
    pub fn seq_start(&self) -> &[usize] {
        &self.seq_start
    }

    /// The features with their columns found, and checked.
    fn compile(&self, template: &[Feature]) -> Result<Vec<Compiled>> {
        template
            .iter()
            .map(|f| {
                if f.parts.len() > 2 {
                    return Err(CoreError::InvalidArgument(format!(
                        "feature {:?} has {} parts; at most 2",
                        f.prefix,
                        f.parts.len()
                    )));
                }
                let parts = f
                    .parts
                    .iter()
                    .map(|p| {
                        let column = self
                            .columns
                            .iter()
                            .position(|c| c.name == p.column)
                            .ok_or_else(|| {
                                CoreError::InvalidArgument(format!(
                                    "feature {:?} reads column {:?}, which is not given",
                                    f.prefix, p.column
                                ))
                            })?;
                        Ok((column, p.transform, p.offset))
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(Compiled {
                    prefix: f.prefix.clone(),
                    parts,
                })
            })
            .collect()
    }

    /// The value number a part reads at position `t` of the sequence `a..b`: the column's
    /// value number, `NONE` for a null, or `outside` past the sequence's ends.
    #[inline]
    fn code(&self, column: usize, offset: i64, t: usize, a: usize, b: usize, outside: u32) -> u32 {
        let j = t as i64 + offset;
        if j < a as i64 || j >= b as i64 {
            outside
        } else {
            self.columns[column].ids[j as usize]
        }
    }

    /// Every position's attribute of each feature (`None`: no attribute), the reference that
    /// [`Crf::tag_words`] must agree with: attribute strings as the recognizer's polars
    /// features build them.
    pub fn attributes(&self, template: &[Feature]) -> Result<Vec<Vec<Option<String>>>> {
        let compiled = self.compile(template)?;
        let mut out = vec![Vec::with_capacity(self.len()); compiled.len()];
        for s in 0..self.seq_start.len() - 1 {
            let (a, b) = (self.seq_start[s], self.seq_start[s + 1]);
            for t in a..b {
                for (f, feature) in compiled.iter().enumerate() {
                    let mut text = feature.prefix.clone();
                    let mut null = false;
                    for (k, &(column, transform, offset)) in feature.parts.iter().enumerate() {
                        if k > 0 {
                            text.push('|');
                        }
                        match self.code(column, offset, t, a, b, OUTSIDE) {
                            OUTSIDE => text.push('#'),
                            NONE => null = true,
                            v => {
                                transform.apply(&self.columns[column].values[v as usize], &mut text)
                            }
                        }
                    }
                    out[f].push((!null).then_some(text));
                }
            }
        }
        Ok(out)
    }
}

/// The code of a position past the ends of its sequence (in [`Words::attributes`]).
const OUTSIDE: u32 = u32::MAX - 1;

/// A feature with its columns found: `(column, transform, offset)` per part.
struct Compiled {
    prefix: String,
    parts: Vec<(usize, Transform, i64)>,
}

/// How one feature finds its attribute number at a position (no attribute: the model's
/// row of zeros, [`Crf::no_attribute`], so that every lookup adds a row, without a branch).
enum Lookup {
    /// One part: `table[value number]`; `table[values]` for a null, `table[values + 1]` past
    /// the sequence's ends.
    Table {
        column: usize,
        offset: i64,
        table: Vec<u32>,
    },
    /// No part or two: the attribute number at each position, worked out before tagging.
    Each(Vec<u32>),
}

impl Crf {
    /// Tag the sequences of `words` with the attributes of `template` (in its order, as
    /// [`Crf::tag`] takes attribute columns): the same as [`Crf::tag`] over
    /// [`Words::attributes`], each distinct attribute formatted and looked up once, and
    /// summed up as [`Summary`] (the labels other than `background`; the best labelling
    /// only when `path`), as forward-backward in log space gives them where `exact` says.
    pub fn tag_words(
        &self,
        words: &Words,
        template: &[Feature],
        background: Option<&str>,
        path: bool,
        exact: Option<&Exact>,
    ) -> Result<Summary> {
        let compiled = words.compile(template)?;
        let background = match background {
            None => None,
            Some(name) => self.labels().iter().position(|l| l == name),
        };
        let zero = self.no_attribute();
        let mut text = String::new();
        let mut derived: FxHashMap<(usize, Transform), Vec<String>> = FxHashMap::default();
        let mut lookups = Vec::with_capacity(compiled.len());
        for feature in &compiled {
            for &(column, transform, _) in &feature.parts {
                derived.entry((column, transform)).or_insert_with(|| {
                    let values = &words.columns[column].values;
                    values
                        .iter()
                        .map(|v| {
                            let mut out = String::new();
                            transform.apply(v, &mut out);
                            out
                        })
                        .collect()
                });
            }
            let mut find = |pieces: &[&str]| {
                text.clear();
                text.push_str(&feature.prefix);
                for (k, piece) in pieces.iter().enumerate() {
                    if k > 0 {
                        text.push('|');
                    }
                    text.push_str(piece);
                }
                self.attribute(&text).unwrap_or(zero)
            };
            lookups.push(match feature.parts[..] {
                [] => {
                    let k = find(&[]);
                    if k == zero {
                        continue; // adds nothing anywhere
                    }
                    Lookup::Each(vec![k; words.len()])
                }
                [(column, transform, offset)] => {
                    let values = &derived[&(column, transform)];
                    let mut table: Vec<u32> = values.iter().map(|v| find(&[v])).collect();
                    table.push(zero);
                    table.push(find(&["#"]));
                    Lookup::Table {
                        column,
                        offset,
                        table,
                    }
                }
                [(c1, t1, o1), (c2, t2, o2)] => {
                    let (v1, v2) = (&derived[&(c1, t1)], &derived[&(c2, t2)]);
                    let (out1, out2) = (v1.len() as u32, v2.len() as u32);
                    let mut cache: FxHashMap<u64, u32> = FxHashMap::default();
                    let mut each = vec![zero; words.len()];
                    for s in 0..words.seq_start.len() - 1 {
                        let (a, b) = (words.seq_start[s], words.seq_start[s + 1]);
                        for (t, slot) in each.iter_mut().enumerate().take(b).skip(a) {
                            let x = words.code(c1, o1, t, a, b, out1);
                            let y = words.code(c2, o2, t, a, b, out2);
                            if x == NONE || y == NONE {
                                continue;
                            }
                            let piece = |v: &Vec<String>, out: u32, code: u32| {
                                if code == out {
                                    "#".to_string()
                                } else {
                                    v[code as usize].clone()
                                }
                            };
                            *slot =
                                *cache
                                    .entry(((x as u64) << 32) | y as u64)
                                    .or_insert_with(|| {
                                        find(&[&piece(v1, out1, x), &piece(v2, out2, y)])
                                    });
                        }
                    }
                    Lookup::Each(each)
                }
                _ => unreachable!("compile allows at most two parts"),
            });
        }
        let l = self.labels().len();
        // Feature by feature over a sequence's positions: each position still adds its
        // features' weights in the template's order, as `tag` does.
        Ok(
            self.summary_by(&words.seq_start, background, path, exact, |a, state| {
                let b = a + state.len() / l;
                for lookup in &lookups {
                    match lookup {
                        Lookup::Table {
                            column,
                            offset,
                            table,
                        } => {
                            let ids = &words.columns[*column].ids;
                            let null = (table.len() - 2) as u32;
                            for (t, row) in (a..b).zip(state.chunks_exact_mut(l)) {
                                let j = t as i64 + offset;
                                let k = if j < a as i64 || j >= b as i64 {
                                    table[table.len() - 1]
                                } else {
                                    // NONE (a null) is the largest u32: min() makes it `null`.
                                    table[ids[j as usize].min(null) as usize]
                                };
                                self.add_weights(row, k);
                            }
                        }
                        Lookup::Each(each) => {
                            for (row, &k) in state.chunks_exact_mut(l).zip(&each[a..b]) {
                                self.add_weights(row, k);
                            }
                        }
                    }
                }
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{BooleanArray, Int32Array, StringArray};
    use std::sync::Arc;

    fn shape(v: &str) -> String {
        let mut out = String::new();
        Transform::Shape.apply(v, &mut out);
        out
    }

    #[test]
    fn transforms() {
        let apply = |t: &str, v: &str| {
            let mut out = String::new();
            Transform::parse(t).unwrap().apply(v, &mut out);
            out
        };
        assert_eq!(apply("", "Émile"), "Émile");
        assert_eq!(apply("first:3", "émile"), "émi");
        assert_eq!(apply("last:3", "émile"), "ile");
        assert_eq!(apply("last:3", "ab"), "ab");
        assert_eq!(apply("len:10", "émile"), "5");
        assert_eq!(apply("len:3", "émile"), "3");
        assert_eq!(shape("Xxxx"), "Xx");
        assert_eq!(shape("12/03"), "dod");
        assert_eq!(shape("McDonald's"), "XxXxox");
        // Non-ASCII: Greek capital, Arabic-Indic digit, titlecase Dz (neither Lu nor Ll).
        assert_eq!(shape("Ωω٣ǅ-"), "Xxdo");
        assert_eq!(shape(""), "");
        for bad in ["first", "first:x", "upper", "len:"] {
            assert!(Transform::parse(bad).is_err(), "{bad}");
        }
    }

    fn part(column: &str, transform: &str, offset: i64) -> Part {
        Part {
            column: column.into(),
            transform: Transform::parse(transform).unwrap(),
            offset,
        }
    }

    fn words() -> Words {
        let w: ArrayRef = Arc::new(StringArray::from(vec![
            Some("john"),
            Some("smith"),
            None,
            Some("seen"),
            Some("john"),
        ]));
        let raw: ArrayRef = Arc::new(StringArray::from(vec![
            Some("John"),
            None,
            Some("12/3"),
            Some("seen"),
            Some("JOHN"),
        ]));
        let flag: ArrayRef = Arc::new(BooleanArray::from(vec![
            Some(true),
            None,
            Some(false),
            Some(true),
            None,
        ]));
        let n: ArrayRef = Arc::new(Int32Array::from(vec![
            Some(3),
            Some(-1),
            None,
            Some(3),
            Some(0),
        ]));
        Words::new(
            &[
                ("w".into(), w, None),
                ("raw".into(), raw, Some(String::new())),
                ("flag".into(), flag, Some("na".into())),
                ("n".into(), n, None),
            ],
            &[3, 0, 2],
        )
        .unwrap()
    }

    fn template() -> Vec<Feature> {
        let feature = |prefix: &str, parts: Vec<Part>| Feature {
            prefix: prefix.into(),
            parts,
        };
        vec![
            feature("bias", vec![]),
            feature("w=", vec![part("w", "", 0)]),
            feature("shp=", vec![part("raw", "shape", 0)]),
            feature("shp-1=", vec![part("raw", "shape", -1)]),
            feature("flag=", vec![part("flag", "", 0)]),
            feature("n=", vec![part("n", "", 0)]),
            feature("w+2=", vec![part("w", "", 2)]),
            feature("w-1|w=", vec![part("w", "", -1), part("w", "", 0)]),
            feature("w|p3+1=", vec![part("w", "", 0), part("raw", "first:3", 1)]),
        ]
    }

    #[test]
    fn attributes_join_prefix_and_parts_with_nulls_and_ends() {
        let got = words().attributes(&template()).unwrap();
        let s = |v: &[Option<&str>]| v.iter().map(|x| x.map(str::to_string)).collect::<Vec<_>>();
        assert_eq!(got[0], s(&[Some("bias"); 5]));
        assert_eq!(
            got[1],
            s(&[
                Some("w=john"),
                Some("w=smith"),
                None,
                Some("w=seen"),
                Some("w=john")
            ])
        );
        // A null raw stands as "" (its shape is empty).
        assert_eq!(
            got[2],
            s(&[
                Some("shp=Xx"),
                Some("shp="),
                Some("shp=dod"),
                Some("shp=x"),
                Some("shp=X")
            ])
        );
        assert_eq!(
            got[3],
            s(&[
                Some("shp-1=#"),
                Some("shp-1=Xx"),
                Some("shp-1="),
                Some("shp-1=#"),
                Some("shp-1=x")
            ])
        );
        assert_eq!(
            got[4],
            s(&[
                Some("flag=true"),
                Some("flag=na"),
                Some("flag=false"),
                Some("flag=true"),
                Some("flag=na")
            ])
        );
        assert_eq!(
            got[5],
            s(&[Some("n=3"), Some("n=-1"), None, Some("n=3"), Some("n=0")])
        );
        // Sequences are [0, 3), [3, 3) and [3, 5): position 0 sees the null at 2.
        assert_eq!(
            got[6],
            s(&[
                None,
                Some("w+2=#"),
                Some("w+2=#"),
                Some("w+2=#"),
                Some("w+2=#")
            ])
        );
        assert_eq!(
            got[7],
            s(&[
                Some("w-1|w=#|john"),
                Some("w-1|w=john|smith"),
                None,
                Some("w-1|w=#|seen"),
                Some("w-1|w=seen|john")
            ])
        );
        assert_eq!(
            got[8],
            s(&[
                Some("w|p3+1=john|"),
                Some("w|p3+1=smith|12/"),
                None,
                Some("w|p3+1=seen|JOH"),
                Some("w|p3+1=john|#")
            ])
        );
    }

    #[test]
    fn tag_words_equals_tag_over_the_attribute_strings() {
        let words = words();
        let template = template();
        let attributes = words.attributes(&template).unwrap();
        // A model knowing some of the attributes (and some it never sees).
        let mut known: Vec<String> = attributes.iter().flatten().flatten().cloned().collect();
        known.sort();
        known.dedup();
        known.retain(|a| !a.starts_with("w=s"));
        known.push("w=nobody".into());
        let l = 3;
        let weights: Vec<f64> = (0..known.len() * l)
            .map(|k| ((k * 7919) % 13) as f64 / 5.0 - 1.2)
            .collect();
        let trans = vec![0.4, -0.3, 0.1, 0.2, 0.9, -0.7, -0.1, 0.3, 0.5];
        let crf = Crf::new(
            vec!["O".into(), "A".into(), "B".into()],
            known,
            weights,
            trans,
        )
        .unwrap();
        let columns: Vec<ArrayRef> = attributes
            .into_iter()
            .map(|c| Arc::new(StringArray::from(c)) as ArrayRef)
            .collect();
        let cols: Vec<StrCol<'_>> = columns
            .iter()
            .map(|c| StrCol::new(c, "a").unwrap())
            .collect();
        let want = crf.tag(&cols, &[3, 0, 2]).unwrap();
        for background in [Some("O"), Some("B"), Some("nothing"), None] {
            let got = crf
                .tag_words(&words, &template, background, true, None)
                .unwrap();
            assert_eq!(got.labels, want.labels);
            let skip = background.and_then(|b| ["O", "A", "B"].iter().position(|x| *x == b));
            for (t, row) in want.marginals.chunks(l).enumerate() {
                let others: Vec<usize> = (0..l).filter(|&j| Some(j) != skip).collect();
                let p: f64 = others.iter().map(|&j| row[j]).sum();
                let best = *others
                    .iter()
                    .reduce(|a, b| if row[*b] > row[*a] { b } else { a })
                    .unwrap();
                assert_eq!(got.p[t], p);
                assert_eq!(got.best[t], best as u32);
            }
            let no_path = crf
                .tag_words(&words, &template, background, false, None)
                .unwrap();
            assert!(no_path.labels.is_empty());
            assert_eq!((no_path.p, no_path.best), (got.p, got.best));
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        let a: ArrayRef = Arc::new(StringArray::from(vec!["x", "y"]));
        let one = |name: &str, a: &ArrayRef| vec![(name.to_string(), a.clone(), None)];
        assert!(Words::new(&one("w", &a), &[3]).is_err());
        assert!(Words::new(&one("w", &a), &[3, -1]).is_err());
        let twice = [one("w", &a), one("w", &a)].concat();
        assert!(Words::new(&twice, &[2]).is_err());
        let nulls: ArrayRef = Arc::new(arrow_array::NullArray::new(2));
        let only = |fill: Option<&str>| {
            let words = Words::new(
                &[("n".into(), nulls.clone(), fill.map(str::to_string))],
                &[2],
            );
            let feature = Feature {
                prefix: "n=".into(),
                parts: vec![part("n", "", 0)],
            };
            words.unwrap().attributes(&[feature]).unwrap().remove(0)
        };
        assert_eq!(only(None), vec![None, None]);
        assert_eq!(only(Some("na")), vec![Some("n=na".to_string()); 2]);
        let floats: ArrayRef = Arc::new(arrow_array::Float64Array::from(vec![1.0, 2.0]));
        assert!(Words::new(&one("f", &floats), &[2]).is_err());
        let words = Words::new(&one("w", &a), &[1, 1]).unwrap();
        assert_eq!(words.len(), 2);
        let unknown = [Feature {
            prefix: "v=".into(),
            parts: vec![part("v", "", 0)],
        }];
        assert!(words.attributes(&unknown).is_err());
        let three = [Feature {
            prefix: "w=".into(),
            parts: vec![part("w", "", 0); 3],
        }];
        assert!(words.attributes(&three).is_err());
    }
}
