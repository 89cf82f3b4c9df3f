//! The process's open-file limit, which bounds how many connections an HTTP gateway can hold.
//!
//! Every connection is a file descriptor. Many systems start a process with a soft limit of
//! 1024 and a far higher hard limit, so before it listens a gateway raises its soft limit to the hard
//! one ([`raise_open_file_limit`]), then fits `gateway.connection_limit` under it
//! ([`fit_connection_limit`]), keeping [`OPEN_FILES_RESERVED`] descriptors for everything
//! else. A connection limit above what fits is lowered, with a warning that says how to make
//! room; a limit that leaves no room for connections at all stops the start.

/// File descriptors kept for everything but client connections: the ledger (a SQLite file,
/// its WAL and shared memory, per connection, and up to eight read connections; or a
/// PostgreSQL pool), pooled upstream and webhook connections, the listener, stdio and the
/// runtime's own.
pub const OPEN_FILES_RESERVED: u64 = 256;
/// What the soft limit is raised to when the hard limit is unlimited: some systems (macOS)
/// refuse "unlimited" for open files, and no connection limit needs more than this.
#[cfg(unix)]
const OPEN_FILES_WHEN_UNLIMITED: u64 = 1024 * 1024;

/// The process's open-file limits after [`raise_open_file_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    /// The soft limit in force: what the process can open.
    pub soft: u64,
    /// The hard limit (`None`: unlimited).
    pub hard: Option<u64>,
}

/// Raises the soft open-file limit to the hard limit, and answers the limits in force. `None`
/// where the system has no such limit (not Unix).
pub fn raise_open_file_limit() -> Option<OpenFileLimit> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let before = getrlimit(Resource::Nofile);
        let target = before.maximum.unwrap_or(OPEN_FILES_WHEN_UNLIMITED);
        if before.current.is_some_and(|current| current < target) {
            let raised = setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(target),
                    maximum: before.maximum,
                },
            );
            if let Err(error) = raised {
                tracing::debug!(%error, target, "could not raise the open-file limit");
            }
        }
        let now = getrlimit(Resource::Nofile);
        Some(OpenFileLimit {
            soft: now.current.unwrap_or(u64::MAX),
            hard: now.maximum,
        })
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// A connection limit fitted under the open-file limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FittedLimit {
    /// The connection limit to serve with.
    pub connections: usize,
    /// Set when the configured limit was lowered: what happened and how to make room.
    pub warning: Option<String>,
}

/// Fits `configured` connections under `limit`, keeping [`OPEN_FILES_RESERVED`]
/// descriptors; an error when no connection at all would fit.
pub fn fit_connection_limit(configured: u32, limit: OpenFileLimit) -> Result<FittedLimit, String> {
    let room = limit.soft.saturating_sub(OPEN_FILES_RESERVED);
    let hard = match limit.hard {
        Some(hard) => hard.to_string(),
        None => "unlimited".to_owned(),
    };
    if room == 0 {
        return Err(format!(
            "the open-file limit is {} (hard limit {hard}), which leaves no room for connections \
beside the {OPEN_FILES_RESERVED} files kept for the ledger, upstreams and logs; raise it \
(`ulimit -n 65536`, or LimitNOFILE= in a systemd unit) and start again",
            limit.soft
        ));
    }
    if u64::from(configured) <= room {
        return Ok(FittedLimit {
            connections: configured as usize,
            warning: None,
        });
    }
    Ok(FittedLimit {
        connections: usize::try_from(room).unwrap_or(usize::MAX),
        warning: Some(format!(
            "gateway.connection_limit is {configured}, but the open-file limit is {} (hard limit \
{hard}) and {OPEN_FILES_RESERVED} files are kept for the ledger, upstreams and logs: serving at \
most {room} connections; raise the limit (`ulimit -n`, or LimitNOFILE= in a systemd unit) or \
lower gateway.connection_limit to {room}",
            limit.soft
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_that_fits_is_kept() {
        let limit = OpenFileLimit {
            soft: 65_536,
            hard: Some(65_536),
        };
        assert_eq!(
            fit_connection_limit(4096, limit),
            Ok(FittedLimit {
                connections: 4096,
                warning: None
            })
        );
    }

    #[test]
    fn a_limit_over_the_open_files_is_lowered_with_a_warning_that_says_how_to_make_room() {
        let limit = OpenFileLimit {
            soft: 1024,
            hard: Some(1024),
        };
        let fitted = fit_connection_limit(4096, limit).unwrap();
        assert_eq!(fitted.connections, 1024 - OPEN_FILES_RESERVED as usize);
        let warning = fitted.warning.unwrap();
        assert!(
            warning.contains("serving at most 768 connections"),
            "{warning}"
        );
        assert!(warning.contains("ulimit -n"), "{warning}");
    }

    #[test]
    fn no_room_for_any_connection_stops_the_start() {
        let limit = OpenFileLimit {
            soft: 200,
            hard: None,
        };
        let error = fit_connection_limit(10, limit).unwrap_err();
        assert!(error.contains("hard limit unlimited"), "{error}");
        assert!(error.contains("ulimit -n"), "{error}");
    }

    #[cfg(unix)]
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let before = getrlimit(Resource::Nofile);
        // Start from a low soft limit, as many systems give a process, so that raising it
        // has something to do.
        let low = 512;
        if before.maximum.is_none_or(|hard| hard > low) {
            setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(low),
                    maximum: before.maximum,
                },
            )
            .unwrap();
        }
        let limit = raise_open_file_limit().unwrap();
        match limit.hard {
            Some(hard) => assert_eq!(limit.soft, hard),
            None => assert!(limit.soft > low, "{limit:?}"),
        }
    }
}
