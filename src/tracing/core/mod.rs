//! Producer/service shared code. No I/O here.
pub mod smb_abi;
