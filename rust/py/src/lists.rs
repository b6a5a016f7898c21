//! `py_lists`: Python lists of values read in one pass, as Arrow list arrays or straight into
//! the mask sampler (`gather_row`).

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_schema::{DataType, Field};
use phisieve_core::CoreError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::convert::to_pyarrow;
use crate::errors::to_py_err;

/// Append the items of `row` (a Python list) to `out` through `item`, which reads one
/// borrowed item and returns None with a Python error set when it does not convert.
pub(crate) fn gather_row<T>(
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

pub(crate) fn py_u32(obj: *mut pyo3::ffi::PyObject) -> Option<u32> {
    py_integer(obj, 0, u32::MAX.into()).map(|v| v as u32)
}

pub(crate) fn py_i32(obj: *mut pyo3::ffi::PyObject) -> Option<i32> {
    py_integer(obj, i32::MIN.into(), i32::MAX.into()).map(|v| v as i32)
}

pub(crate) fn py_bool(obj: *mut pyo3::ffi::PyObject) -> Option<bool> {
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

/// Add this file's classes and functions to `phisieve._core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(py_lists, m)?)?;
    Ok(())
}
