//! Files as the readers open them: regular files only. A FIFO given as a
//! file blocks its reader for ever, and a device (a link to `/dev/zero`)
//! never ends; both are refused, by what they are, before a byte is read.

use std::fs::{self, File};
use std::path::Path;

use crate::LogitsError;

/// Refuses `path` unless it is a regular file (a link is followed).
pub(crate) fn regular_file(path: &Path) -> Result<(), LogitsError> {
    let shown = path.display().to_string();
    let metadata = fs::metadata(path).map_err(|source| LogitsError::Io {
        path: shown.clone(),
        source,
    })?;
    if metadata.is_file() {
        return Ok(());
    }
    Err(LogitsError::NotRegularFile {
        path: shown,
        kind: kind_of(&metadata.file_type()),
    })
}

/// What a file that is not a regular one is, in words.
fn kind_of(file_type: &fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if file_type.is_char_device() || file_type.is_block_device() {
            return "a device";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    if file_type.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// The bytes of a regular file.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, LogitsError> {
    regular_file(path)?;
    fs::read(path).map_err(|source| LogitsError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// A regular file, opened for positioned reads.
pub(crate) fn open(path: &Path) -> Result<File, LogitsError> {
    regular_file(path)?;
    File::open(path).map_err(|source| LogitsError::Io {
        path: path.display().to_string(),
        source,
    })
}
