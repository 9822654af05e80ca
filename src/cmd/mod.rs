//! Command-line applets and their helpers.

pub mod pbtx;
