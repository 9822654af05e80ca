//! Runtime view of our .proto schemas, generated at build time from proto/
//! (see src/codegen/schema.rs): message, field and enum descriptors for
//! schema-driven code such as the text-format config parser.

pub mod ftrace_reading;
mod json;
pub mod service_events;
pub mod services;
mod table;
pub mod trigger;
pub mod wire_check;

/// The build-time generator, compiled here too so its tests run.
#[cfg(test)]
#[path = "../codegen/schema.rs"]
mod codegen;

#[doc(hidden)]
pub use json::dump_json;
pub use table::{
    enum_type, enums, message, messages, EnumDesc, EnumValueDesc, FieldDesc, FieldType, Label,
    MessageDesc, PACKAGE,
};
