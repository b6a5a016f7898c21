//! `mask_batch` and `mask_rows`: masked- and causal-LM training rows that never target
//! protected words (`phisieve_core::masking`).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef};
use phisieve_core::masking::{MaskConfig, Protect, Row, Sampler, Sequence};
use phisieve_core::CoreError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use pyo3_arrow::PyArray;

use crate::errors::{run, to_py_err};
use crate::lists::{gather_row, py_bool, py_i32, py_u32};

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

/// Add this file's classes and functions to `phisieve._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(mask_batch, m)?)?;
    m.add_function(wrap_pyfunction!(mask_rows, m)?)?;
    Ok(())
}
