//! Read-only views over Arrow string columns of any offset width.

use crate::error::{CoreError, Result};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, LargeStringArray, StringArray, StringViewArray};
use arrow_schema::DataType;

/// A string column: `string`, `large_string` or `string_view`.
#[derive(Clone, Copy)]
pub enum StrCol<'a> {
    Utf8(&'a StringArray),
    Large(&'a LargeStringArray),
    View(&'a StringViewArray),
}

impl<'a> StrCol<'a> {
    /// View `array` as strings; `what` names the column in errors.
    pub fn new(array: &'a ArrayRef, what: &'static str) -> Result<Self> {
        match array.data_type() {
            DataType::Utf8 => Ok(Self::Utf8(array.as_string::<i32>())),
            DataType::LargeUtf8 => Ok(Self::Large(array.as_string::<i64>())),
            DataType::Utf8View => Ok(Self::View(array.as_string_view())),
            other => Err(CoreError::Type {
                what,
                found: other.to_string(),
            }),
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            Self::Utf8(a) => a.len(),
            Self::Large(a) => a.len(),
            Self::View(a) => a.len(),
        }
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value at `i`, or `None` when null.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&'a str> {
        match self {
            Self::Utf8(a) => a.is_valid(i).then(|| a.value(i)),
            Self::Large(a) => a.is_valid(i).then(|| a.value(i)),
            Self::View(a) => a.is_valid(i).then(|| a.value(i)),
        }
    }
}
