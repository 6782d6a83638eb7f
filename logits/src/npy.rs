//! The `.npy` header's dtype, and integer arrays (token ids, vocabulary
//! maps) in whichever integer type numpy and torch write.

use std::io::Cursor;

use ndarray::ArrayD;
use ndarray_npy::npy::header::Header;
use ndarray_npy::{ReadNpyExt, ReadableElement};
use py_literal::Value as PyValue;

use crate::LogitsError;

/// A `.npy` header's dtype descriptor, such as `<f4`.
pub(crate) fn npy_descriptor(header: &Header) -> String {
    match &header.type_descriptor {
        PyValue::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// numpy's name for a descriptor such as `<i4`, for messages.
pub(crate) fn numpy_dtype_name(descriptor: &str) -> String {
    let kind = match descriptor.get(1..2) {
        Some("i") => "int",
        Some("u") => "uint",
        Some("f") => "float",
        Some("b") => "bool",
        Some("c") => "complex",
        _ => return descriptor.to_string(),
    };
    match descriptor.get(2..).and_then(|b| b.parse::<usize>().ok()) {
        Some(bytes) if kind != "bool" => format!("{kind}{}", 8 * bytes),
        _ => kind.to_string(),
    }
}

/// A `.npy` file's integer array, widened to i128 (no id or offset
/// overflows it): ndarray-npy reads an exact dtype, so each integer type
/// numpy and torch write is read as itself.
pub(crate) fn npy_integers(
    bytes: &[u8],
    name: &str,
    path: &str,
) -> Result<(Vec<usize>, Vec<i128>), LogitsError> {
    fn widened<T: ReadableElement + Copy + Into<i128>>(
        bytes: &[u8],
    ) -> Result<(Vec<usize>, Vec<i128>), ndarray_npy::ReadNpyError> {
        ArrayD::<T>::read_npy(bytes)
            .map(|a| (a.shape().to_vec(), a.iter().map(|&x| x.into()).collect()))
    }
    let format = |message: String| LogitsError::Format {
        path: path.to_string(),
        format: "npy",
        message: format!("array `{name}`: {message}"),
    };
    header_fits(bytes, bytes.len() as u64, name, path)?;
    let header = Header::from_reader(&mut Cursor::new(bytes)).map_err(|e| format(e.to_string()))?;
    let descriptor = npy_descriptor(&header);
    match descriptor.get(1..) {
        Some("i8") => widened::<i64>(bytes),
        Some("i4") => widened::<i32>(bytes),
        Some("u8") => widened::<u64>(bytes),
        Some("u4") => widened::<u32>(bytes),
        _ => {
            return Err(LogitsError::Dtype {
                path: path.to_string(),
                array: name.to_string(),
                dtype: format!(
                    "{} (token ids are int32, int64, uint32 or uint64)",
                    numpy_dtype_name(&descriptor)
                ),
            });
        }
    }
    .map_err(|e| format(e.to_string()))
}

/// Refuses an `.npy` header whose length field claims more than the file
/// holds (`held` bytes), before the header parser allocates that length:
/// a v2 header of length 0xFFFFFFFF asked for 4 GB. What is not an `.npy`
/// header at all is left to the parser's own message.
pub(crate) fn header_fits(
    head: &[u8],
    held: u64,
    name: &str,
    path: &str,
) -> Result<(), LogitsError> {
    if head.len() < 10 || !head.starts_with(b"\x93NUMPY") {
        return Ok(());
    }
    let (length, prefix) = match head[6] {
        1 => (u64::from(u16::from_le_bytes([head[8], head[9]])), 10),
        _ if head.len() >= 12 => (
            u64::from(u32::from_le_bytes([head[8], head[9], head[10], head[11]])),
            12,
        ),
        _ => return Ok(()),
    };
    if prefix + length > held {
        return Err(LogitsError::Format {
            path: path.to_string(),
            format: "npy",
            message: format!(
                "array `{name}`: its header claims {length} bytes, the file holds {held}"
            ),
        });
    }
    Ok(())
}
