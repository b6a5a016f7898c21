//! `phisieve._core`: thin PyO3 bindings over `phisieve-core`.
//!
//! Arrow data arrives zero-copy through the Arrow PyCapsule interface (pyo3-arrow), so any
//! pyarrow, polars or arro3 array works. Every heavy call goes through [`run`], which releases
//! the GIL and maps core errors onto the exception classes of `phisieve.errors`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use arrow_array::builder::{BooleanBuilder, Int32Builder, ListBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::Array;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use phisieve_core::index::terms_schema;
use phisieve_core::marker::Policy;
use phisieve_core::masking::{MaskConfig, Protect, Row, Sampler, Sequence};
use phisieve_core::text::StrCol;
use phisieve_core::{CoreError, IndexBuilder, IndexConfig, Marker, Normalizer};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use pyo3_arrow::{PyArray, PyRecordBatch, PyTable};

/// Raise the `phisieve.errors` exception that matches a core error.
fn to_py_err(py: Python<'_>, err: CoreError) -> PyErr {
    let make = || -> PyResult<PyErr> {
        let errors = py.import("phisieve.errors")?;
        let kwargs = PyDict::new(py);
        let class = match &err {
            CoreError::InvalidArgument(_) => "ConfigError",
            CoreError::NotGrouped { row, .. } => {
                kwargs.set_item("row", row)?;
                "NotGroupedError"
            }
            CoreError::Null { what, row } => {
                kwargs.set_item("row", row)?;
                kwargs.set_item("column", what)?;
                "InputError"
            }
            CoreError::Type { what, .. } => {
                kwargs.set_item("column", what)?;
                "InputError"
            }
            CoreError::Finished => "PhisieveError",
        };
        let message = match &err {
            // Where is carried by the keyword arguments; keep the message short.
            CoreError::Null { what, .. } => format!("{what} is null"),
            other => other.to_string(),
        };
        let exc = if class == "PhisieveError" {
            errors.getattr(class)?.call1((message,))?
        } else {
            errors.getattr(class)?.call((message,), Some(&kwargs))?
        };
        Ok(PyErr::from_value(exc))
    };
    make().unwrap_or_else(|e| e)
}

/// Release the GIL for `work` and map its error.
fn run<T: Send>(
    py: Python<'_>,
    work: impl FnOnce() -> phisieve_core::Result<T> + Send,
) -> PyResult<T> {
    // A panic is a bug in the core; its message may quote the text being processed (a
    // string slice, say), so it becomes a generic error and the message is dropped.
    let result = py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)));
    match result {
        Ok(r) => r.map_err(|e| to_py_err(py, e)),
        Err(_) => {
            let message =
                "internal error in phisieve's core (a bug: please report it; no input text is shown)";
            let make = || -> PyResult<PyErr> {
                let class = py.import("phisieve.errors")?.getattr("PhisieveError")?;
                Ok(PyErr::from_value(class.call1((message,))?))
            };
            Err(make().unwrap_or_else(|e| e))
        }
    }
}

/// Print where a panic happened, never its message (it may quote note text).
fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("phisieve core: internal error at {at}");
    }));
}

fn normalizer(py: Python<'_>, name: &str) -> PyResult<Normalizer> {
    Normalizer::parse(name).map_err(|e| to_py_err(py, e))
}

/// Builds the patient x term index from batches of documents grouped by patient.
#[pyclass(module = "phisieve._core", name = "IndexBuilder")]
struct PyIndexBuilder {
    inner: IndexBuilder,
    holding: bool,
    /// Whether it keeps freed memory (else it purges at once).
    hold: bool,
}

impl PyIndexBuilder {
    fn release(&mut self) {
        if std::mem::take(&mut self.holding) {
            release_memory(self.hold);
        }
    }
}

impl Drop for PyIndexBuilder {
    fn drop(&mut self) {
        self.release();
    }
}

#[pymethods]
impl PyIndexBuilder {
    #[new]
    #[pyo3(signature = (ngram=1, k=2, normalize="nfkc_lower", modulus=1, residue=0, threads=0, hold=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        ngram: usize,
        k: u32,
        normalize: &str,
        modulus: u32,
        residue: u32,
        threads: usize,
        hold: bool,
    ) -> PyResult<Self> {
        let cfg = IndexConfig {
            max_n: ngram,
            k,
            normalizer: normalizer(py, normalize)?,
            modulus,
            residue,
            threads,
        };
        let inner = IndexBuilder::new(cfg).map_err(|e| to_py_err(py, e))?;
        // `hold=False` (under a memory budget): freed memory goes back to the OS at once,
        // which keeps the peak lower at some cost in speed.
        hold_memory(hold);
        Ok(Self {
            inner,
            holding: true,
            hold,
        })
    }

    /// Add one batch: `patient_ids[i]` wrote `texts[i]`.
    fn add(&mut self, py: Python<'_>, patient_ids: PyArray, texts: PyArray) -> PyResult<()> {
        let (pids, _) = patient_ids.into_inner();
        let (texts, _) = texts.into_inner();
        let inner = &mut self.inner;
        run(py, move || inner.add(&pids, &texts))
    }

    /// Approximate bytes of memory the index holds.
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    /// Approximate bytes of memory at the index's peak: what it holds and what finishing it
    /// adds (sort order and output batches).
    fn peak_bytes(&self) -> usize {
        self.inner.peak_bytes()
    }

    /// The part of `peak_bytes` that every partition pass holds whole (the vocabularies).
    fn fixed_bytes(&self) -> usize {
        self.inner.fixed_bytes()
    }

    /// Documents, tokens and patients seen so far.
    fn totals<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = self.inner.totals();
        let d = PyDict::new(py);
        d.set_item("documents", t.documents)?;
        d.set_item("tokens", t.tokens)?;
        d.set_item("patients", t.patients)?;
        Ok(d)
    }

    /// Every patient id seen, in order of first appearance.
    fn patient_ids(&self) -> Vec<String> {
        self.inner.patient_ids()
    }

    /// Finish the index and return the terms table (a pyarrow Table sorted by n, term).
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = &mut self.inner;
        let batches = run(py, move || inner.finish());
        self.release();
        PyTable::try_new(batches?, terms_schema())?.into_pyarrow(py)
    }
}

/// A blacklist of indirect n-grams that marks the protected words of texts.
#[pyclass(module = "phisieve._core", name = "Marker")]
struct PyMarker {
    inner: Marker,
}

fn texts_col<'a>(py: Python<'_>, texts: &'a ArrayRef) -> PyResult<StrCol<'a>> {
    StrCol::new(texts, "text").map_err(|e| to_py_err(py, e))
}

#[pymethods]
impl PyMarker {
    #[new]
    #[pyo3(signature = (terms, normalize="nfkc_lower"))]
    fn new(py: Python<'_>, terms: PyArray, normalize: &str) -> PyResult<Self> {
        let mut inner = Marker::new(normalizer(py, normalize)?);
        let (terms, _) = terms.into_inner();
        let col = StrCol::new(&terms, "term").map_err(|e| to_py_err(py, e))?;
        run(py, || {
            for i in 0..col.len() {
                if let Some(t) = col.get(i) {
                    inner.insert(t)?;
                }
            }
            Ok(())
        })?;
        Ok(Self { inner })
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Per text, one flag per word: whether `policy` ("all" or "minimal") protects it.
    #[pyo3(signature = (texts, policy="all"))]
    fn mark<'py>(
        &self,
        py: Python<'py>,
        texts: PyArray,
        policy: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let policy = Policy::parse(policy).map_err(|e| to_py_err(py, e))?;
        let (texts, _) = texts.into_inner();
        let col = texts_col(py, &texts)?;
        let inner = &self.inner;
        let out = run(py, move || {
            let mut b = ListBuilder::new(BooleanBuilder::new());
            for i in 0..col.len() {
                match col.get(i) {
                    Some(t) => {
                        b.values().append_slice(&inner.mark(t, policy));
                        b.append(true);
                    }
                    None => b.append(false),
                }
            }
            Ok(Arc::new(b.finish()) as ArrayRef)
        })?;
        // pyarrow.array() takes the Arrow array through the PyCapsule interface.
        let array = PyArray::from_array_ref(out).into_pyobject(py)?;
        py.import("pyarrow")?.getattr("array")?.call1((array,))
    }

    /// Words in `texts` and how many the `all` and `minimal` policies protect.
    fn counts<'py>(&self, py: Python<'py>, texts: PyArray) -> PyResult<Bound<'py, PyDict>> {
        let (texts, _) = texts.into_inner();
        let col = texts_col(py, &texts)?;
        let inner = &self.inner;
        let (words, all, minimal) = run(py, move || {
            use rayon::prelude::*;
            Ok((0..col.len())
                .into_par_iter()
                .map(|i| {
                    let c = inner.counts(col.get(i).unwrap_or(""));
                    (c.words, c.all, c.minimal)
                })
                .reduce(|| (0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2)))
        })?;
        let d = PyDict::new(py);
        d.set_item("words", words)?;
        d.set_item("all", all)?;
        d.set_item("minimal", minimal)?;
        Ok(d)
    }
}

/// Words of each text: code-point `starts`/`ends` and normalised `words` (list columns).
#[pyfunction]
#[pyo3(signature = (texts, normalize="nfkc_lower"))]
fn tokenize<'py>(py: Python<'py>, texts: PyArray, normalize: &str) -> PyResult<Bound<'py, PyAny>> {
    let norm = normalizer(py, normalize)?;
    let (texts, _) = texts.into_inner();
    let col = texts_col(py, &texts)?;
    let batch = run(py, move || {
        let mut starts = ListBuilder::new(Int32Builder::new());
        let mut ends = ListBuilder::new(Int32Builder::new());
        let mut words = ListBuilder::new(StringBuilder::new());
        let mut buf = String::new();
        for i in 0..col.len() {
            let text = col.get(i).unwrap_or("");
            for w in phisieve_core::word_spans(text) {
                starts.values().append_value(w.char_start as i32);
                ends.values().append_value(w.char_end as i32);
                buf.clear();
                norm.normalize_into(&text[w.byte_start..w.byte_end], &mut buf);
                words.values().append_value(&buf);
            }
            starts.append(true);
            ends.append(true);
            words.append(true);
        }
        let item = |t: DataType| DataType::List(Arc::new(Field::new("item", t, true)));
        let schema = Schema::new(vec![
            Field::new("starts", item(DataType::Int32), false),
            Field::new("ends", item(DataType::Int32), false),
            Field::new("words", item(DataType::Utf8), false),
        ]);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(starts.finish()),
            Arc::new(ends.finish()),
            Arc::new(words.finish()),
        ];
        RecordBatch::try_new(Arc::new(schema), columns)
            .map_err(|e| CoreError::InvalidArgument(e.to_string()))
    })?;
    PyRecordBatch::new(batch).into_pyarrow(py)
}

/// Normalise one word as the index does (for tests and debugging).
#[pyfunction]
#[pyo3(signature = (word, normalize="nfkc_lower"))]
fn normalize_word(py: Python<'_>, word: &str, normalize: &str) -> PyResult<String> {
    Ok(normalizer(py, normalize)?.normalize(word))
}

/// A list column of an encoded batch: offsets into its values, and which rows are null.
fn list_column<'a>(
    py: Python<'_>,
    array: &'a ArrayRef,
    name: &'static str,
    rows: usize,
) -> PyResult<&'a arrow_array::ListArray> {
    let bad = |msg: String| to_py_err(py, CoreError::InvalidArgument(msg));
    let list = array.as_list_opt::<i32>().ok_or_else(|| {
        bad(format!(
            "column {name} must be a list, not {}",
            array.data_type()
        ))
    })?;
    if list.len() != rows {
        return Err(bad(format!(
            "column {name} has {} rows, expected {rows}",
            list.len()
        )));
    }
    if let Some(row) = (0..rows).find(|&i| list.is_null(i)) {
        return Err(bad(format!("column {name} is null at row {row}")));
    }
    // A null inside a list is no value at all: a null flag must never read as "not
    // protected", nor a null id as token 0.
    let values = list.values();
    if values.null_count() > 0 {
        let offsets = list.value_offsets();
        if let Some(row) = (0..rows)
            .find(|&r| (offsets[r] as usize..offsets[r + 1] as usize).any(|j| values.is_null(j)))
        {
            return Err(bad(format!(
                "column {name} holds a null value in row {row}; encoded lists must not \
                 hold nulls"
            )));
        }
    }
    Ok(list)
}

/// The training rows of an encoded batch, each padded to `length`: `input_ids`,
/// `attention_mask` and `labels` as flat int64 Arrow arrays of rows x length values (numpy
/// views them without a copy). See `phisieve_core::masking`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn mask_batch<'py>(
    py: Python<'py>,
    seq_ids: PyArray,
    input_ids: PyArray,
    word_ids: PyArray,
    protected: PyArray,
    direct: PyArray,
    indirect: PyArray,
    length: usize,
    settings: MaskSettings,
) -> PyResult<Bound<'py, PyTuple>> {
    let bad = |msg: String| to_py_err(py, CoreError::InvalidArgument(msg));
    let cfg = settings.config(py)?;
    let (seq_ids, _) = seq_ids.into_inner();
    let seq_ids = seq_ids.as_primitive_opt::<UInt64Type>().ok_or_else(|| {
        bad(format!(
            "column seq_id must be uint64, not {}",
            seq_ids.data_type()
        ))
    })?;
    let rows = seq_ids.len();
    if seq_ids.null_count() > 0 {
        return Err(bad("column seq_id has nulls".to_string()));
    }
    let arrays = [input_ids, word_ids, protected, direct, indirect].map(|a| a.into_inner().0);
    let ids = list_column(py, &arrays[0], "input_ids", rows)?;
    let words = list_column(py, &arrays[1], "word_ids", rows)?;
    let flag_lists = [
        list_column(py, &arrays[2], "protected", rows)?,
        list_column(py, &arrays[3], "direct", rows)?,
        list_column(py, &arrays[4], "indirect", rows)?,
    ];
    let id_values = ids
        .values()
        .as_primitive_opt::<UInt32Type>()
        .ok_or_else(|| {
            bad(format!(
                "column input_ids must hold uint32, not {}",
                ids.value_type()
            ))
        })?;
    let word_values = words
        .values()
        .as_primitive_opt::<Int32Type>()
        .ok_or_else(|| {
            bad(format!(
                "column word_ids must hold int32, not {}",
                words.value_type()
            ))
        })?;
    let names = ["protected", "direct", "indirect"];
    let mut flags = Vec::with_capacity(3);
    for (list, name) in flag_lists.iter().zip(names) {
        flags.push(list.values().as_boolean_opt().ok_or_else(|| {
            bad(format!(
                "column {name} must hold booleans, not {}",
                list.value_type()
            ))
        })?);
    }
    let out = run(py, move || {
        let size = rows.checked_mul(length).ok_or_else(|| {
            CoreError::InvalidArgument(format!("{rows} rows of length {length} is too large"))
        })?;
        let (mut oa, mut ob, mut oc) = (vec![0i64; size], vec![0i64; size], vec![0i64; size]);
        let mut sampler = Sampler::default();
        for r in 0..rows {
            // Each list column has its own offsets (columns may be laid out differently);
            // only the lengths of row r must agree.
            let start = |l: &arrow_array::ListArray| l.value_offsets()[r] as usize;
            let n = ids.value_length(r) as usize;
            for (list, name) in flag_lists.iter().zip(names).chain([(&words, "word_ids")]) {
                if list.value_length(r) as usize != n {
                    return Err(CoreError::InvalidArgument(format!(
                        "sequence at row {r}: {name} and input_ids differ in length"
                    )));
                }
            }
            let flag = cfg
                .protect
                .pick(0, 1, 2)
                .map(|f| (flags[f], start(flag_lists[f])));
            let (s, w) = (start(ids), start(words));
            let seq = Sequence {
                seq_id: seq_ids.value(r),
                input_ids: &id_values.values()[s..s + n],
                word_ids: &word_values.values()[w..w + n],
                protected: |i: usize| flag.is_some_and(|(values, at)| values.value(at + i)),
            };
            sampler.fill(
                &seq,
                &cfg,
                row_at([&mut oa[..], &mut ob[..], &mut oc[..]], r, length),
                r,
            )?;
        }
        Ok([oa, ob, oc])
    })?;
    let pyarrow = py.import("pyarrow")?;
    let arrays = out
        .into_iter()
        .map(|v| {
            let array: ArrayRef = Arc::new(arrow_array::Int64Array::from(v));
            pyarrow
                .getattr("array")?
                .call1((PyArray::from_array_ref(array).into_pyobject(py)?,))
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, arrays)
}

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

/// The mask sampler's settings, read from a dict with one item per field (what
/// `phisieve.training.masking` builds once for both batch builders).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct MaskSettings {
    causal: bool,
    protect: String,
    probability: f64,
    replace_mask: f64,
    replace_random: f64,
    mask_id: u32,
    pad_id: u32,
    vocab_size: u32,
    seed: u64,
    epoch: u64,
}

impl MaskSettings {
    /// The checked sampler configuration.
    fn config(&self, py: Python<'_>) -> PyResult<MaskConfig> {
        let protect = match self.protect.as_str() {
            "nothing" => Protect::Nothing,
            "all" => Protect::All,
            "direct" => Protect::Direct,
            "indirect" => Protect::Indirect,
            other => {
                return Err(to_py_err(
                    py,
                    CoreError::InvalidArgument(format!(
                        "unknown protection {other:?}; expected nothing, all, direct or indirect"
                    )),
                ))
            }
        };
        let cfg = MaskConfig {
            causal: self.causal,
            protect,
            probability: self.probability,
            replace_mask: self.replace_mask,
            replace_random: self.replace_random,
            mask_id: self.mask_id,
            pad_id: self.pad_id,
            vocab_size: self.vocab_size,
            seed: self.seed,
            epoch: self.epoch,
        };
        cfg.validate().map_err(|e| to_py_err(py, e))?;
        Ok(cfg)
    }
}

/// Row `r` of three flat outputs of rows x `length` values.
fn row_at<'a>(outs: [&'a mut [i64]; 3], r: usize, length: usize) -> Row<'a> {
    let w = r * length..(r + 1) * length;
    let [a, b, c] = outs;
    Row {
        input_ids: &mut a[w.clone()],
        attention_mask: &mut b[w.clone()],
        labels: &mut c[w],
    }
}

/// Append the items of `row` (a Python list) to `out` through `item`, which reads one
/// borrowed item and returns None with a Python error set when it does not convert.
fn gather_row<T>(
    py: Python<'_>,
    row: &Bound<'_, PyAny>,
    item: &impl Fn(*mut pyo3::ffi::PyObject) -> Option<T>,
    out: &mut Vec<T>,
) -> PyResult<()> {
    let list = row.cast::<PyList>()?;
    let n = list.len();
    out.reserve(n);
    for i in 0..n {
        // SAFETY: `list` is a live list and `i` < its length; the borrowed item is only read
        // while the GIL is held and the list is unchanged.
        let obj = unsafe { pyo3::ffi::PyList_GetItem(list.as_ptr(), i as pyo3::ffi::Py_ssize_t) };
        match item(obj) {
            Some(v) => out.push(v),
            None => {
                return Err(PyErr::take(py).unwrap_or_else(|| {
                    pyo3::exceptions::PyTypeError::new_err("a value does not convert")
                }))
            }
        }
    }
    Ok(())
}

/// An integer item in `lo..=hi`; None with a Python error set otherwise.
fn py_integer(obj: *mut pyo3::ffi::PyObject, lo: i64, hi: i64) -> Option<i64> {
    use pyo3::ffi;
    // SAFETY: `obj` is a valid borrowed reference (see `gather_row`), the GIL is held.
    unsafe {
        let v = ffi::PyLong_AsLongLong(obj);
        if v == -1 && !ffi::PyErr_Occurred().is_null() {
            return None;
        }
        if v < lo || v > hi {
            ffi::PyErr_SetString(
                ffi::PyExc_OverflowError,
                c"a value is out of range for its column".as_ptr(),
            );
            return None;
        }
        Some(v)
    }
}

fn py_u32(obj: *mut pyo3::ffi::PyObject) -> Option<u32> {
    py_integer(obj, 0, u32::MAX.into()).map(|v| v as u32)
}

fn py_i32(obj: *mut pyo3::ffi::PyObject) -> Option<i32> {
    py_integer(obj, i32::MIN.into(), i32::MAX.into()).map(|v| v as i32)
}

fn py_bool(obj: *mut pyo3::ffi::PyObject) -> Option<bool> {
    // SAFETY: the singletons live as long as the interpreter; `obj` is a valid borrowed
    // reference and the GIL is held (see `gather_row`).
    unsafe {
        if obj == pyo3::ffi::Py_True() {
            Some(true)
        } else if obj == pyo3::ffi::Py_False() {
            Some(false)
        } else {
            // Anything else Python calls a bool (numpy.bool_): the slow way.
            let py = Python::assume_attached();
            let any = Bound::from_borrowed_ptr(py, obj);
            any.extract::<bool>().map_err(|e| e.restore(py)).ok()
        }
    }
}

/// Python lists of values, one list per row (what `datasets` hands a collator), as one Arrow
/// list array of `kind` (`uint32`, `int32` or `bool`): one pass over the items, no Python or
/// Arrow object made per item. A row that is not a list, or an item that does not convert
/// (out of range, not an integer or not a bool), raises `TypeError` or `OverflowError`.
#[pyfunction]
fn py_lists<'py>(
    py: Python<'py>,
    rows: &Bound<'py, PyList>,
    kind: &str,
) -> PyResult<Bound<'py, PyAny>> {
    fn gather<T>(
        py: Python<'_>,
        rows: &Bound<'_, PyList>,
        item: impl Fn(*mut pyo3::ffi::PyObject) -> Option<T>,
    ) -> PyResult<(Vec<i32>, Vec<T>)> {
        let mut offsets = Vec::with_capacity(rows.len() + 1);
        offsets.push(0i32);
        let mut values = Vec::new();
        for row in rows.iter() {
            gather_row(py, &row, &item, &mut values)?;
            let end = i32::try_from(values.len()).map_err(|_| {
                pyo3::exceptions::PyOverflowError::new_err("more than 2^31 values in one batch")
            })?;
            offsets.push(end);
        }
        Ok((offsets, values))
    }
    let (data_type, offsets, values): (DataType, Vec<i32>, ArrayRef) = match kind {
        "uint32" => {
            let (o, v) = gather(py, rows, py_u32)?;
            (
                DataType::UInt32,
                o,
                Arc::new(arrow_array::UInt32Array::from(v)),
            )
        }
        "int32" => {
            let (o, v) = gather(py, rows, py_i32)?;
            (
                DataType::Int32,
                o,
                Arc::new(arrow_array::Int32Array::from(v)),
            )
        }
        "bool" => {
            let (o, v) = gather(py, rows, py_bool)?;
            (
                DataType::Boolean,
                o,
                Arc::new(arrow_array::BooleanArray::from(v)),
            )
        }
        other => {
            return Err(to_py_err(
                py,
                CoreError::InvalidArgument(format!(
                    "unknown kind {other:?}; expected uint32, int32 or bool"
                )),
            ))
        }
    };
    let field = Arc::new(Field::new("item", data_type, true));
    let offsets = arrow_buffer::OffsetBuffer::new(arrow_buffer::ScalarBuffer::from(offsets));
    let list = arrow_array::ListArray::try_new(field, offsets, values, None)
        .map_err(|e| to_py_err(py, CoreError::InvalidArgument(e.to_string())))?;
    to_pyarrow(py, Arc::new(list))
}

/// The training rows of a batch given as Python lists (what `datasets` hands a collator):
/// `seq_ids`, and per row its `input_ids`, `word_ids` and the flags of the tokens that the
/// objective protects (`flags`: one list of bools per row, the `encoded` column that
/// `protect` reads; None when it protects nothing). Each row's lists are read once, straight
/// into the sampler, with the same draws as `mask_batch`. Returns `input_ids`,
/// `attention_mask` and `labels` as bytearrays of rows x length native int64 values.
#[pyfunction]
fn mask_rows<'py>(
    py: Python<'py>,
    seq_ids: Vec<u64>,
    input_ids: &Bound<'py, PyList>,
    word_ids: &Bound<'py, PyList>,
    flags: Option<&Bound<'py, PyList>>,
    length: usize,
    settings: MaskSettings,
) -> PyResult<Bound<'py, PyTuple>> {
    let bad = |msg: String| to_py_err(py, CoreError::InvalidArgument(msg));
    let cfg = settings.config(py)?;
    let rows = seq_ids.len();
    for (list, name) in [(input_ids, "input_ids"), (word_ids, "word_ids")]
        .into_iter()
        .chain(flags.map(|f| (f, "flags")))
    {
        if list.len() != rows {
            return Err(bad(format!(
                "{name} has {} rows, expected {rows}",
                list.len()
            )));
        }
    }
    if cfg.protect != Protect::Nothing && flags.is_none() {
        return Err(bad("this protection needs the flags it reads".to_string()));
    }
    let size = rows
        .checked_mul(length)
        .ok_or_else(|| bad(format!("{rows} rows of length {length} is too large")))?;
    // The outputs are written in place into the bytearrays that Python receives.
    let bytes = size
        .checked_mul(8)
        .ok_or_else(|| bad(format!("{rows} rows of length {length} is too large")))?;
    let arrays = [(); 3].map(|_| pyo3::types::PyByteArray::new_with(py, bytes, |_| Ok(())));
    let [a, b, c] = arrays;
    let (a, b, c) = (a?, b?, c?);
    // SAFETY: three distinct bytearrays that nothing else references yet, not resized while
    // these slices live (no Python code runs that could see them until they are returned).
    let (oa, ob, oc) = unsafe { (a.as_bytes_mut(), b.as_bytes_mut(), c.as_bytes_mut()) };
    fn as_i64(buf: &mut [u8]) -> Option<&mut [i64]> {
        // SAFETY: any bit pattern is a valid i64; align_to_mut reports misalignment.
        let (head, body, tail) = unsafe { buf.align_to_mut::<i64>() };
        (head.is_empty() && tail.is_empty()).then_some(body)
    }
    let misaligned = || bad("an output buffer is not aligned for int64".to_string());
    let oa = as_i64(oa).ok_or_else(misaligned)?;
    let ob = as_i64(ob).ok_or_else(misaligned)?;
    let oc = as_i64(oc).ok_or_else(misaligned)?;
    let (mut ids, mut words, mut flag) = (Vec::new(), Vec::new(), Vec::new());
    let mut sampler = Sampler::default();
    let protects = cfg.protect != Protect::Nothing;
    for (r, &seq_id) in seq_ids.iter().enumerate() {
        ids.clear();
        words.clear();
        flag.clear();
        gather_row(py, &input_ids.get_item(r)?, &py_u32, &mut ids)?;
        gather_row(py, &word_ids.get_item(r)?, &py_i32, &mut words)?;
        if let Some(f) = flags {
            gather_row(py, &f.get_item(r)?, &py_bool, &mut flag)?;
            if flag.len() != ids.len() {
                return Err(bad(format!(
                    "sequence at row {r}: the flags and input_ids differ in length"
                )));
            }
        }
        let seq = Sequence {
            seq_id,
            input_ids: &ids,
            word_ids: &words,
            protected: |i: usize| protects && flag.get(i).copied().unwrap_or(false),
        };
        sampler
            .fill(
                &seq,
                &cfg,
                row_at([&mut *oa, &mut *ob, &mut *oc], r, length),
                r,
            )
            .map_err(|e| to_py_err(py, e))?;
    }
    PyTuple::new(py, [a, b, c])
}

/// A trained linear-chain CRF (the `crf` recognizer), tagging from Arrow attribute strings:
/// `phisieve_core::crf::Crf`.
#[pyclass(frozen, module = "phisieve._core")]
struct CrfTagger {
    inner: phisieve_core::crf::Crf,
}

#[pymethods]
impl CrfTagger {
    #[new]
    fn new(
        py: Python<'_>,
        labels: Vec<String>,
        attributes: Vec<String>,
        weights: Vec<f64>,
        transitions: Vec<f64>,
    ) -> PyResult<Self> {
        phisieve_core::crf::Crf::new(labels, attributes, weights, transitions)
            .map(|inner| Self { inner })
            .map_err(|e| to_py_err(py, e))
    }

    /// The labels, in the order of label numbers and marginals.
    #[getter]
    fn labels(&self) -> Vec<String> {
        self.inner.labels().to_vec()
    }

    /// Tag sequences: position `t`'s attributes are the values at row `t` of `columns`
    /// (string arrays of one length; a null is no attribute), `per_sequence` (int64) how many
    /// positions each sequence has. Returns the best labelling's label numbers (uint32, one
    /// per position) and the label marginals (float64, positions × labels, row-major).
    fn tag<'py>(
        &self,
        py: Python<'py>,
        columns: Vec<PyArray>,
        per_sequence: PyArray,
    ) -> PyResult<Bound<'py, PyTuple>> {
        use arrow_array::types::Int64Type;
        let bad = |m: String| to_py_err(py, CoreError::InvalidArgument(m));
        let arrays: Vec<ArrayRef> = columns.into_iter().map(|c| c.into_inner().0).collect();
        let cols = arrays
            .iter()
            .map(|a| StrCol::new(a, "attribute column"))
            .collect::<phisieve_core::Result<Vec<_>>>()
            .map_err(|e| to_py_err(py, e))?;
        let counts = per_sequence.into_inner().0;
        let counts = counts.as_primitive_opt::<Int64Type>().ok_or_else(|| {
            bad(format!(
                "per_sequence must be int64, not {}",
                counts.data_type()
            ))
        })?;
        if counts.null_count() > 0 {
            return Err(bad("per_sequence has nulls".to_string()));
        }
        let per_sequence = counts.values().as_ref();
        let tagged = run(py, || self.inner.tag(&cols, per_sequence))?;
        let labels = to_pyarrow(py, Arc::new(arrow_array::UInt32Array::from(tagged.labels)))?;
        let marginals = to_pyarrow(
            py,
            Arc::new(arrow_array::Float64Array::from(tagged.marginals)),
        )?;
        PyTuple::new(py, [labels, marginals])
    }
}

/// A Hugging Face tokenizer (its `tokenizer.json`), run from Rust for `encode`: texts in, token
/// ids and character offsets out as Arrow arrays, with no Python object per token. Truncation
/// and padding are off, and special tokens written in a text are encoded as text.
#[pyclass(frozen, module = "phisieve._core")]
struct ModelTokenizer {
    inner: tokenizers::Tokenizer,
}

#[pymethods]
impl ModelTokenizer {
    #[new]
    fn new(py: Python<'_>, json: &str) -> PyResult<Self> {
        let mut inner: tokenizers::Tokenizer = json.parse().map_err(|e| {
            to_py_err(
                py,
                CoreError::InvalidArgument(format!("not a tokenizer.json this build reads: {e}")),
            )
        })?;
        inner
            .with_truncation(None)
            .map_err(|e| to_py_err(py, CoreError::InvalidArgument(e.to_string())))?;
        inner.with_padding(None);
        inner.set_encode_special_tokens(true);
        Ok(Self { inner })
    }

    /// Token ids (uint32), start and end character offsets (int64) of every text's tokens
    /// (no special tokens added), and each text's token count (int64).
    fn encode<'py>(&self, py: Python<'py>, texts: Vec<String>) -> PyResult<Bound<'py, PyTuple>> {
        let tokenizer = &self.inner;
        let encodings = py
            .detach(|| tokenizer.encode_batch_char_offsets(texts, false))
            .map_err(|_| {
                to_py_err(
                    py,
                    CoreError::InvalidArgument("the tokenizer failed on a text".to_string()),
                )
            })?;
        let total: usize = encodings.iter().map(|e| e.len()).sum();
        let (mut ids, mut starts, mut ends) = (
            Vec::with_capacity(total),
            Vec::with_capacity(total),
            Vec::with_capacity(total),
        );
        let mut counts = Vec::with_capacity(encodings.len());
        for e in &encodings {
            ids.extend_from_slice(e.get_ids());
            for &(a, b) in e.get_offsets() {
                starts.push(a as i64);
                ends.push(b as i64);
            }
            counts.push(e.len() as i64);
        }
        let arrays: [ArrayRef; 4] = [
            Arc::new(arrow_array::UInt32Array::from(ids)),
            Arc::new(arrow_array::Int64Array::from(starts)),
            Arc::new(arrow_array::Int64Array::from(ends)),
            Arc::new(arrow_array::Int64Array::from(counts)),
        ];
        let arrays = arrays
            .into_iter()
            .map(|a| to_pyarrow(py, a))
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, arrays)
    }
}

/// Packs documents into model sequences for `encode` (`phisieve_core::pack`).
#[pyclass(module = "phisieve._core")]
struct Packer {
    inner: phisieve_core::pack::Packer,
}

#[pymethods]
impl Packer {
    #[new]
    #[pyo3(signature = (max_len, prefix, suffix, doc_end))]
    fn new(
        py: Python<'_>,
        max_len: usize,
        prefix: Vec<u32>,
        suffix: Vec<u32>,
        doc_end: Option<u32>,
    ) -> PyResult<Self> {
        let special = phisieve_core::pack::Special {
            prefix,
            suffix,
            doc_end,
        };
        let inner =
            phisieve_core::pack::Packer::new(max_len, special).map_err(|e| to_py_err(py, e))?;
        Ok(Packer { inner })
    }

    /// A packer with the same settings that has seen nothing.
    fn fresh(&self) -> Self {
        Packer {
            inner: self.inner.fresh(),
        }
    }

    /// Whether no sequence is being packed or waiting to be taken.
    fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Tokens left out so far because their sequence held no word.
    #[getter]
    fn dropped_tokens(&self) -> u64 {
        self.inner.dropped_tokens
    }

    #[setter]
    fn set_dropped_tokens(&mut self, value: u64) {
        self.inner.dropped_tokens = value;
    }

    /// The current patient's last sequence is complete.
    fn finish_patient(&mut self) {
        self.inner.finish_patient();
    }

    /// Append a batch's documents, in order: document `r` (patient `patients[r]`, id
    /// `doc_ids[r]`) holds the tokens `bounds[r]..bounds[r + 1]` of `ids` (uint32), `words`
    /// (int64, document-local word numbers, -1: none), `direct` and `indirect` (bool).
    #[allow(clippy::too_many_arguments)]
    fn add_batch(
        &mut self,
        py: Python<'_>,
        patients: Vec<String>,
        doc_ids: Vec<String>,
        bounds: PyArray,
        ids: PyArray,
        words: PyArray,
        direct: PyArray,
        indirect: PyArray,
    ) -> PyResult<()> {
        let bad = |msg: &str| to_py_err(py, CoreError::InvalidArgument(msg.to_string()));
        let (bounds, _) = bounds.into_inner();
        let (ids, _) = ids.into_inner();
        let (words, _) = words.into_inner();
        let (direct, _) = direct.into_inner();
        let (indirect, _) = indirect.into_inner();
        let bounds = bounds
            .as_primitive_opt::<arrow_array::types::Int64Type>()
            .ok_or_else(|| bad("bounds must be int64"))?
            .values();
        let ids = ids
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| bad("ids must be uint32"))?
            .values();
        let words = words
            .as_primitive_opt::<arrow_array::types::Int64Type>()
            .ok_or_else(|| bad("words must be int64"))?
            .values();
        let direct: Vec<bool> = direct
            .as_boolean_opt()
            .ok_or_else(|| bad("direct must be bool"))?
            .values()
            .iter()
            .collect();
        let indirect: Vec<bool> = indirect
            .as_boolean_opt()
            .ok_or_else(|| bad("indirect must be bool"))?
            .values()
            .iter()
            .collect();
        let docs = patients.len();
        if doc_ids.len() != docs || bounds.len() != docs + 1 {
            return Err(bad(
                "one patient and doc id per document, and documents + 1 bounds",
            ));
        }
        let n = ids.len();
        if words.len() != n || direct.len() != n || indirect.len() != n {
            return Err(bad(
                "ids, words, direct and indirect must have one entry per token",
            ));
        }
        for r in 0..docs {
            let (a, b) = (bounds[r], bounds[r + 1]);
            if a < 0 || b < a || b as usize > n {
                return Err(bad("bounds must rise within the tokens"));
            }
            let t = a as usize..b as usize;
            self.inner
                .add(
                    &patients[r],
                    &doc_ids[r],
                    &ids[t.clone()],
                    &words[t.clone()],
                    &direct[t.clone()],
                    &indirect[t],
                )
                .map_err(|e| to_py_err(py, e))?;
        }
        Ok(())
    }

    /// The finished sequences as a record batch (`patient_id`, `doc_ids`, `input_ids`,
    /// `word_ids`, `protected`, `direct`, `indirect`), or None when there is none.
    fn take<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let laid = self.inner.take();
        if laid.is_empty() {
            return Ok(None);
        }
        let mut patient = StringBuilder::new();
        let mut docs = ListBuilder::new(StringBuilder::new());
        let mut ids = ListBuilder::new(arrow_array::builder::UInt32Builder::new());
        let mut words = ListBuilder::new(Int32Builder::new());
        let mut protected = ListBuilder::new(BooleanBuilder::new());
        let mut direct = ListBuilder::new(BooleanBuilder::new());
        let mut indirect = ListBuilder::new(BooleanBuilder::new());
        for s in &laid {
            patient.append_value(&s.patient);
            for d in &s.doc_ids {
                docs.values().append_value(d);
            }
            docs.append(true);
            ids.values().append_slice(&s.ids);
            ids.append(true);
            words.values().append_slice(&s.words);
            words.append(true);
            for (&d, &x) in s.direct.iter().zip(&s.indirect) {
                protected.values().append_value(d || x);
                direct.values().append_value(d);
                indirect.values().append_value(x);
            }
            protected.append(true);
            direct.append(true);
            indirect.append(true);
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("patient_id", Arc::new(patient.finish())),
            ("doc_ids", Arc::new(docs.finish())),
            ("input_ids", Arc::new(ids.finish())),
            ("word_ids", Arc::new(words.finish())),
            ("protected", Arc::new(protected.finish())),
            ("direct", Arc::new(direct.finish())),
            ("indirect", Arc::new(indirect.finish())),
        ];
        let batch = RecordBatch::try_from_iter(columns)
            .map_err(|e| to_py_err(py, CoreError::InvalidArgument(e.to_string())))?;
        Ok(Some(PyRecordBatch::new(batch).into_pyarrow(py)?))
    }
}

/// Model tokens aligned with phisieve's words (`phisieve_core::align::align`): per token the
/// text-local number of the first word it overlaps (int64, -1: none), and per flag (bool
/// arrays, one entry per word) whether any word it overlaps has it.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn align_tokens<'py>(
    py: Python<'py>,
    tok_starts: PyArray,
    tok_ends: PyArray,
    tok_counts: PyArray,
    word_starts: PyArray,
    word_ends: PyArray,
    word_counts: PyArray,
    flags: Vec<PyArray>,
) -> PyResult<Bound<'py, PyTuple>> {
    use arrow_array::types::Int64Type;
    let bad = |m: String| to_py_err(py, CoreError::InvalidArgument(m));
    let ints = [
        tok_starts,
        tok_ends,
        tok_counts,
        word_starts,
        word_ends,
        word_counts,
    ]
    .map(|a| a.into_inner().0);
    let names = [
        "tok_starts",
        "tok_ends",
        "tok_counts",
        "word_starts",
        "word_ends",
        "word_counts",
    ];
    let mut cols = Vec::with_capacity(6);
    for (a, name) in ints.iter().zip(names) {
        let col = a
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| bad(format!("{name} must be int64, not {}", a.data_type())))?;
        cols.push(col.values().as_ref());
    }
    let flag_arrays: Vec<ArrayRef> = flags.into_iter().map(|f| f.into_inner().0).collect();
    let mut flag_values: Vec<Vec<bool>> = Vec::with_capacity(flag_arrays.len());
    for f in &flag_arrays {
        let b = f
            .as_boolean_opt()
            .ok_or_else(|| bad(format!("flags must be bool, not {}", f.data_type())))?;
        flag_values.push(b.values().iter().collect());
    }
    let aligned = run(py, || {
        let refs: Vec<&[bool]> = flag_values.iter().map(Vec::as_slice).collect();
        phisieve_core::align::align(cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], &refs)
    })?;
    let words = to_pyarrow(py, Arc::new(arrow_array::Int64Array::from(aligned.words)))?;
    let flags = aligned
        .flags
        .into_iter()
        .map(|f| to_pyarrow(py, Arc::new(arrow_array::BooleanArray::from(f))))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, [words, PyTuple::new(py, flags)?.into_any()])
}

fn to_pyarrow<'py>(py: Python<'py>, array: ArrayRef) -> PyResult<Bound<'py, PyAny>> {
    py.import("pyarrow")?
        .getattr("array")?
        .call1((PyArray::from_array_ref(array).into_pyobject(py)?,))
}

/// Keyed draws, one `uint64` per row: HMAC-SHA256 under `secret` of the row's values in
/// `parts` (string arrays of one length; a null differs from ""). See
/// `phisieve_core::surrogate::KeyedHasher`.
#[pyfunction]
fn keyed_draws<'py>(
    py: Python<'py>,
    secret: &[u8],
    parts: Vec<PyArray>,
) -> PyResult<Bound<'py, PyAny>> {
    use phisieve_core::surrogate::KeyedHasher;
    use rayon::prelude::*;
    let arrays: Vec<ArrayRef> = parts.into_iter().map(|p| p.into_inner().0).collect();
    let cols = arrays
        .iter()
        .map(|a| StrCol::new(a, "part"))
        .collect::<phisieve_core::Result<Vec<_>>>()
        .map_err(|e| to_py_err(py, e))?;
    let rows = cols.first().map_or(0, |c| c.len());
    if cols.iter().any(|c| c.len() != rows) {
        return Err(to_py_err(
            py,
            CoreError::InvalidArgument("all parts must have the same length".into()),
        ));
    }
    let draws = run(py, move || {
        let hasher = KeyedHasher::new(secret)?;
        Ok((0..rows)
            .into_par_iter()
            .with_min_len(4096)
            .map(|i| {
                let parts: Vec<Option<&[u8]>> =
                    cols.iter().map(|c| c.get(i).map(str::as_bytes)).collect();
                hasher.draw(&parts)
            })
            .collect::<Vec<u64>>())
    })?;
    to_pyarrow(py, Arc::new(arrow_array::UInt64Array::from(draws)))
}

/// The fixed hash of each id of a string array (`phisieve_core::hash::id_hash`: FNV-1a 64
/// over the UTF-8 bytes, finished with SplitMix64's output function), as a `uint64` array;
/// null for a null id. The index keeps per term the `k` patients smallest by it.
#[pyfunction]
fn id_hashes<'py>(py: Python<'py>, ids: PyArray) -> PyResult<Bound<'py, PyAny>> {
    use phisieve_core::hash::id_hash;
    let (ids, _) = ids.into_inner();
    let col = StrCol::new(&ids, "id").map_err(|e| to_py_err(py, e))?;
    let hashes = run(py, move || {
        Ok(arrow_array::UInt64Array::from_iter(
            (0..col.len()).map(|i| col.get(i).map(id_hash)),
        ))
    })?;
    to_pyarrow(py, Arc::new(hashes))
}

/// Replace code-point ranges of texts: edit `i` puts `with_[i]` in place of
/// `starts[i]..ends[i]` of `texts[rows[i]]` (rows not decreasing; one row's edits sorted and
/// disjoint). Returns `(texts, starts, ends)`: the new texts (large_string) and each
/// replacement's code-point range in its new text (int32).
#[pyfunction]
fn splice<'py>(
    py: Python<'py>,
    texts: PyArray,
    rows: PyArray,
    starts: PyArray,
    ends: PyArray,
    with_: PyArray,
) -> PyResult<Bound<'py, PyTuple>> {
    use phisieve_core::surrogate::splice_column;
    let (texts, _) = texts.into_inner();
    let (with_, _) = with_.into_inner();
    let bad = |what: &str| {
        to_py_err(
            py,
            CoreError::InvalidArgument(format!("{what} must be a non-null integer array")),
        )
    };
    let rows = rows.into_inner().0;
    let rows = rows
        .as_primitive_opt::<UInt64Type>()
        .filter(|a| a.null_count() == 0)
        .ok_or_else(|| bad("rows (uint64)"))?;
    let (starts, ends) = (starts.into_inner().0, ends.into_inner().0);
    let starts = starts
        .as_primitive_opt::<Int32Type>()
        .filter(|a| a.null_count() == 0)
        .ok_or_else(|| bad("starts (int32)"))?;
    let ends = ends
        .as_primitive_opt::<Int32Type>()
        .filter(|a| a.null_count() == 0)
        .ok_or_else(|| bad("ends (int32)"))?;
    let col = texts_col(py, &texts)?;
    let with = StrCol::new(&with_, "replacement").map_err(|e| to_py_err(py, e))?;
    let spliced = run(py, move || {
        splice_column(&col, rows.values(), starts.values(), ends.values(), &with)
    })?;
    PyTuple::new(
        py,
        [
            to_pyarrow(py, Arc::new(spliced.texts))?,
            to_pyarrow(py, Arc::new(arrow_array::Int32Array::from(spliced.starts)))?,
            to_pyarrow(py, Arc::new(arrow_array::Int32Array::from(spliced.ends)))?,
        ],
    )
}

/// Rule detections of direct identifiers, one row each: `text` (row of the input), code-point
/// `start`/`end`, `label`, `rule` and `score`. See `phisieve_core::rules`.
#[pyfunction]
fn detect_rules<'py>(py: Python<'py>, texts: PyArray) -> PyResult<Bound<'py, PyAny>> {
    use arrow_array::builder::{Float32Builder, UInt64Builder};
    use phisieve_core::rules::detect;
    use rayon::prelude::*;
    let (texts, _) = texts.into_inner();
    let col = texts_col(py, &texts)?;
    let batch = run(py, move || {
        let per_row: Vec<Vec<phisieve_core::rules::Detection>> = (0..col.len())
            .into_par_iter()
            .with_min_len(64)
            .map(|i| col.get(i).map(detect).unwrap_or_default())
            .collect();
        let mut row = UInt64Builder::new();
        let (mut start, mut end) = (Int32Builder::new(), Int32Builder::new());
        let (mut label, mut rule) = (StringBuilder::new(), StringBuilder::new());
        let mut score = Float32Builder::new();
        for (i, found) in per_row.iter().enumerate() {
            for d in found {
                let fit = |v: usize| {
                    i32::try_from(v).map_err(|_| {
                        CoreError::InvalidArgument(format!("row {i}: offsets exceed int32"))
                    })
                };
                row.append_value(i as u64);
                start.append_value(fit(d.char_start)?);
                end.append_value(fit(d.char_end)?);
                label.append_value(d.label);
                rule.append_value(d.rule);
                score.append_value(d.score);
            }
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("text", Arc::new(row.finish())),
            ("start", Arc::new(start.finish())),
            ("end", Arc::new(end.finish())),
            ("label", Arc::new(label.finish())),
            ("rule", Arc::new(rule.finish())),
            ("score", Arc::new(score.finish())),
        ];
        RecordBatch::try_from_iter(columns).map_err(|e| CoreError::InvalidArgument(e.to_string()))
    })?;
    PyRecordBatch::new(batch).into_pyarrow(py)
}

/// mimalloc's `mi_option_purge_delay` (the same index in its v2 and v3 headers) and default.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const DEFAULT_PURGE_DELAY_MS: std::ffi::c_long = 10;
/// Index builders alive that keep freed memory for reuse (the default).
static ACTIVE_BUILDERS: AtomicUsize = AtomicUsize::new(0);
/// Index builders alive under a memory budget: freed memory goes back at once.
static LEAN_BUILDERS: AtomicUsize = AtomicUsize::new(0);

/// Set mimalloc's purge delay for the builders alive: keep freed memory while any builder
/// holds it (batch after batch reuses the same amount, and re-faulting (zeroing) returned
/// pages cost up to a quarter of the index's time); else purge at once while a builder under
/// a memory budget lives (a lower peak); else the default, giving the kept memory back. An
/// explicit MIMALLOC_PURGE_DELAY in the environment wins.
fn apply_purge_delay() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    let (held, lean) = (
        ACTIVE_BUILDERS.load(Ordering::SeqCst),
        LEAN_BUILDERS.load(Ordering::SeqCst),
    );
    let delay = if held > 0 {
        -1
    } else if lean > 0 {
        0
    } else {
        DEFAULT_PURGE_DELAY_MS
    };
    // SAFETY: setting an option is thread-safe and valid at any time; mi_collect only frees
    // memory mimalloc holds unused.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, delay);
        if held == 0 {
            libmimalloc_sys::mi_collect(true);
        }
    }
}

/// A builder starts: `hold` keeps freed memory while it lives, else it is purged at once.
fn hold_memory(hold: bool) {
    let count = if hold {
        &ACTIVE_BUILDERS
    } else {
        &LEAN_BUILDERS
    };
    count.fetch_add(1, Ordering::SeqCst);
    apply_purge_delay();
}

/// A builder started with `hold_memory(hold)` is done.
fn release_memory(hold: bool) {
    let count = if hold {
        &ACTIVE_BUILDERS
    } else {
        &LEAN_BUILDERS
    };
    count.fetch_sub(1, Ordering::SeqCst);
    apply_purge_delay();
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    quiet_panics();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<PyIndexBuilder>()?;
    m.add_class::<PyMarker>()?;
    m.add_function(wrap_pyfunction!(mask_batch, m)?)?;
    m.add_function(wrap_pyfunction!(py_lists, m)?)?;
    m.add_function(wrap_pyfunction!(mask_rows, m)?)?;
    m.add_class::<ModelTokenizer>()?;
    m.add_class::<CrfTagger>()?;
    m.add_class::<Packer>()?;
    m.add_function(wrap_pyfunction!(align_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(find_placeholders, m)?)?;
    m.add_function(wrap_pyfunction!(keyed_draws, m)?)?;
    m.add_function(wrap_pyfunction!(id_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(splice, m)?)?;
    m.add_function(wrap_pyfunction!(detect_rules, m)?)?;
    m.add_function(wrap_pyfunction!(tokenize, m)?)?;
    m.add_function(wrap_pyfunction!(normalize_word, m)?)?;
    Ok(())
}
