//! Runtime view of our .proto schemas.

pub mod services;
