//! Integration tests: hostile. Attacks on tracebox as a hostile tester
//! makes them (issue 33): each is bounded in time, run in CI, and checks
//! both the data and the words the user is shown.

#[path = "../support/mod.rs"]
mod support;

mod interrupts;
