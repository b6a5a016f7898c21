//! Core errors raised as the exception classes of `phisieve.errors`, the GIL released for
//! heavy work ([`run`]) and panics reported without their message.

use phisieve_core::CoreError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Raise the `phisieve.errors` exception that matches a core error.
pub(crate) fn to_py_err(py: Python<'_>, err: CoreError) -> PyErr {
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
pub(crate) fn run<T: Send>(
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
pub(crate) fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("phisieve core: internal error at {at}");
    }));
}
