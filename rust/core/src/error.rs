//! Errors of the core. Messages say what and where, never the text being processed.

/// What went wrong in the core.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CoreError {
    /// An argument is out of range or inconsistent.
    #[error("{0}")]
    InvalidArgument(String),
    /// A required value is missing (a null patient id, say) at a row of the batch.
    #[error("{what} is null at row {row}")]
    Null { what: &'static str, row: usize },
    /// Documents of one patient are not contiguous in the stream.
    #[error(
        "documents are not grouped by patient: patient id at row {row} of batch {batch} \
         was already seen before other patients' documents"
    )]
    NotGrouped { batch: u64, row: usize },
    /// A column has a type the core cannot read.
    #[error("{what} must be a string column, not {found}")]
    Type { what: &'static str, found: String },
    /// The builder was used after `finish`.
    #[error("the index was already finished")]
    Finished,
}

/// Result with [`CoreError`].
pub type Result<T> = std::result::Result<T, CoreError>;
