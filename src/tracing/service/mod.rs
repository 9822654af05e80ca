//! The tracing service's pure building blocks: the central trace buffer,
//! the validator for producer packets and the trusted trailer the service
//! appends to each of them. Nothing here touches the OS.

pub mod packet_validator;
pub mod sequence_ids;
pub mod trace_buffer;
pub mod trusted_trailer;
