//! A command's verdict that is not a failure of the command, with its own exit status.

/// A command's verdict that is not a failure of the command itself (`reconcile` found a
/// critical mismatch): printed as it is, with its own exit status, so that scripts can tell
/// "the check ran and failed" from "the check could not run" (status 1).
#[derive(Debug)]
pub struct Exit {
    pub status: u8,
    pub message: String,
}

impl Exit {
    pub fn new(status: u8, message: String) -> Exit {
        Exit { status, message }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}
