//! Integration tests: board. One binary; each module was its own file.

#[path = "../support/mod.rs"]
mod support;

mod android_rc;
mod cli_messages;
mod example_configs;
mod first_hour;
mod install_sh;
mod socket_users;
mod systemd_units;
