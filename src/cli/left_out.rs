//! What a build without a command's cargo feature has in the command's place: a command of
//! the same name that refuses to run (or to be parsed), naming the feature it needs. The
//! command table in `cli/mod.rs` then lists every command in every build.

use super::flags::UsageError;

/// The error of a command this build left out (its cargo feature was off).
fn left_out(feature: &str) -> UsageError {
    UsageError(format!(
        "this backoffd was built without it (cargo feature `{feature}`)"
    ))
}

/// `backoffd demo`, in a build without the `demo` feature.
#[cfg(not(feature = "demo"))]
pub mod demo {
    use super::{left_out, UsageError};

    /// Refuses to run.
    pub fn main(_: &[String]) -> Result<i32, UsageError> {
        Err(left_out("demo"))
    }

    /// Refuses to be parsed, as [`main`] refuses to run.
    #[cfg(any(test, fuzzing))]
    pub fn parse(_: &[String]) -> Result<(), UsageError> {
        Err(left_out("demo"))
    }
}

/// `backoffd timer-bench`, in a build without the `timer-bench` feature.
#[cfg(not(feature = "timer-bench"))]
pub mod timer_bench {
    use super::{left_out, UsageError};

    /// Refuses to run.
    pub fn main(_: &[String]) -> Result<i32, UsageError> {
        Err(left_out("timer-bench"))
    }

    /// Refuses to be parsed, as [`main`] refuses to run.
    #[cfg(any(test, fuzzing))]
    pub fn parse(_: &[String]) -> Result<(), UsageError> {
        Err(left_out("timer-bench"))
    }
}
