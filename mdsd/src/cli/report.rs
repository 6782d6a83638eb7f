//! The folder `mdsd eval --out` writes: files and plots, each failure named
//! with its path.

use std::path::Path;

use super::Error;
use super::eval::plot;

pub struct ReportFolder<'a> {
    dir: &'a Path,
}

impl<'a> ReportFolder<'a> {
    /// The folder, created if it is not there.
    pub fn create(dir: &'a Path) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(|e| Error::Output {
            path: format!("the report folder {}", dir.display()),
            message: e.to_string(),
        })?;
        Ok(Self { dir })
    }

    pub fn write(&self, name: &str, text: String) -> Result<(), Error> {
        let path = self.dir.join(name);
        std::fs::write(&path, text).map_err(|e| Error::Output {
            path: format!("the report file {}", path.display()),
            message: e.to_string(),
        })
    }

    /// `acceptance.png` and `acceptance.svg`.
    pub fn plots(&self, title: &str, series: &[plot::Series]) -> Result<(), Error> {
        for name in ["acceptance.png", "acceptance.svg"] {
            let path = self.dir.join(name);
            plot::draw(&path, title, series).map_err(|message| Error::Output {
                path: format!("the plot {}", path.display()),
                message,
            })?;
        }
        Ok(())
    }
}
