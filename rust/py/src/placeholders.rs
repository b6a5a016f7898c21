//! `find_placeholders`: MIMIC-III `[** ... **]` placeholders (`phisieve_core::placeholders`).

use std::sync::Arc;

use arrow_array::builder::{Int32Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use phisieve_core::CoreError;
use pyo3::prelude::*;
use pyo3_arrow::{PyArray, PyRecordBatch};

use crate::convert::texts_col;
use crate::errors::run;

/// Every MIMIC-III placeholder of each text, one row each: `text` (row of the input), code-point
/// `start`/`end`, `form` (empty, age_over_90, date, named, unterminated, stray_close), the
/// named parts (`category`, `qualifier`, `id`) and the date parts (`year`, `month`, `day`
/// with 0 when absent, and `shape`).
#[pyfunction]
fn find_placeholders<'py>(py: Python<'py>, texts: PyArray) -> PyResult<Bound<'py, PyAny>> {
    use arrow_array::builder::{UInt32Builder, UInt64Builder};
    use phisieve_core::placeholders::{find, DateShape, Form};
    let (texts, _) = texts.into_inner();
    let col = texts_col(py, &texts)?;
    let batch = run(py, move || {
        let mut row = UInt64Builder::new();
        let (mut start, mut end) = (Int32Builder::new(), Int32Builder::new());
        let mut form = StringBuilder::new();
        let (mut cat, mut qual, mut id) = (
            StringBuilder::new(),
            StringBuilder::new(),
            StringBuilder::new(),
        );
        let (mut year, mut month, mut day) = (
            UInt32Builder::new(),
            UInt32Builder::new(),
            UInt32Builder::new(),
        );
        let mut shape = StringBuilder::new();
        for i in 0..col.len() {
            let Some(text) = col.get(i) else { continue };
            for p in find(text) {
                row.append_value(i as u64);
                start.append_value(p.char_start as i32);
                end.append_value(p.char_end as i32);
                let part = |r: Option<(usize, usize)>| r.map(|(a, b)| &text[a..b]);
                let (f, c, q, d, date) = match &p.form {
                    Form::Empty => ("empty", None, None, None, None),
                    Form::AgeOver90 => ("age_over_90", None, None, None, None),
                    Form::Date(d) => ("date", None, None, None, Some(*d)),
                    Form::Named {
                        category,
                        qualifier,
                        id,
                    } => (
                        "named",
                        part(Some(*category)),
                        part(*qualifier),
                        part(*id),
                        None,
                    ),
                    Form::Unterminated => ("unterminated", None, None, None, None),
                    Form::StrayClose => ("stray_close", None, None, None, None),
                };
                form.append_value(f);
                cat.append_option(c);
                qual.append_option(q);
                id.append_option(d);
                year.append_option(date.map(|d| d.year));
                month.append_option(date.map(|d| d.month));
                day.append_option(date.map(|d| d.day));
                shape.append_option(date.map(|d| match d.shape {
                    DateShape::YearMonthDay => "y-m-d",
                    DateShape::MonthYear => "m/y",
                    DateShape::Year => "y",
                    DateShape::MonthDayDash => "m-d",
                    DateShape::MonthDaySlash => "m/d",
                }));
            }
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("text", Arc::new(row.finish())),
            ("start", Arc::new(start.finish())),
            ("end", Arc::new(end.finish())),
            ("form", Arc::new(form.finish())),
            ("category", Arc::new(cat.finish())),
            ("qualifier", Arc::new(qual.finish())),
            ("id", Arc::new(id.finish())),
            ("year", Arc::new(year.finish())),
            ("month", Arc::new(month.finish())),
            ("day", Arc::new(day.finish())),
            ("shape", Arc::new(shape.finish())),
        ];
        RecordBatch::try_from_iter(columns).map_err(|e| CoreError::InvalidArgument(e.to_string()))
    })?;
    PyRecordBatch::new(batch).into_pyarrow(py)
}

/// Add this file's classes and functions to `phisieve._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(find_placeholders, m)?)?;
    Ok(())
}
