//! Charts (filled in below).
use crate::error::PerfError;
use crate::report::Report;
use std::path::Path;
pub fn command(_args: &[String]) -> Result<(), PerfError> {
    Ok(())
}
pub fn draw_report(_report: &Report, _path: &Path) -> Result<(), PerfError> {
    Ok(())
}
