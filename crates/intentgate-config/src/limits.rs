//! Named limits of the values in a config file, checked after it is read (the file's own
//! limits, its size and nesting, are intentgate-config-file's). A config is written by an
//! operator, but it may also be generated, templated or fetched, so nothing in it is allowed
//! to grow without bound.

// The file's own limits too, so that every limit of a config has one place to be looked up.
pub use intentgate_config_file::limits::*;

/// Most business fields a list's `match` pairs records by. An effect is identified by a few
/// (an order and an amount); more is a record copied whole, not a pairing.
pub const MATCH_FIELDS_MAX: usize = 8;
/// Most tools in one config. MCP clients show every tool to the model, and models choose
/// badly among more than a few hundred.
pub const TOOLS_MAX: usize = 512;
/// Longest tool description, in characters. Models read it on every turn.
pub const DESCRIPTION_LENGTH_MAX: usize = 4096;
/// Longest per-status message override, in characters.
pub const MESSAGE_LENGTH_MAX: usize = 2048;
/// Longest `once_per` noun ("order", "customer and amount"), in characters.
pub const ONCE_PER_LENGTH_MAX: usize = 64;
/// Longest retention of intents, in days. Ten years is past any audit requirement.
pub const RETENTION_DAYS_MAX: u32 = 3650;
/// Smallest HTTP request body limit: a tool call with small arguments must fit.
pub const BODY_LIMIT_BYTES_MIN: u64 = 1024;
/// Largest HTTP request body limit. Stored arguments are capped at 64 KiB anyway
/// (`intentgate_core::limits::ARGUMENTS_BYTES_MAX`); 64 MiB bounds memory per request.
pub const BODY_LIMIT_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Most requests served at once. Each holds a connection and possibly a lease.
pub const CONCURRENCY_LIMIT_MAX: u32 = 65_536;
/// Longest shutdown grace. In-flight side effects should finish, but an orchestrator kills
/// a process that takes longer than a few minutes anyway.
pub const SHUTDOWN_GRACE_MS_MAX: u64 = 10 * 60 * 1000;
/// Shortest header read timeout, in milliseconds. A client on a slow link needs more than
/// this to send a head; below it, real clients would be cut off.
pub const HEADER_READ_TIMEOUT_MS_MIN: u64 = 100;
/// Longest header read timeout, in milliseconds. Longer, and a few thousand half-open sockets
/// hold the connection limit for minutes.
pub const HEADER_READ_TIMEOUT_MS_MAX: u64 = 5 * 60 * 1000;
/// Shortest body read timeout, in milliseconds: as for a head, a client on a slow link needs
/// more than this to send a small body.
pub const BODY_READ_TIMEOUT_MS_MIN: u64 = 100;
/// Longest body read timeout, in milliseconds. Longer, and connections that send a head and
/// stall their bodies hold slots for minutes.
pub const BODY_READ_TIMEOUT_MS_MAX: u64 = 5 * 60 * 1000;
/// Shortest idle timeout, in milliseconds: a kept-alive connection must survive the moment
/// between a response and the client's next request.
pub const IDLE_TIMEOUT_MS_MIN: u64 = 100;
/// Longest idle timeout, in milliseconds (an hour). An idle connection holds a slot of the
/// connection limit and a file descriptor; clients reconnect cheaply.
pub const IDLE_TIMEOUT_MS_MAX: u64 = 60 * 60 * 1000;
/// Most connections open at once: Linux's default ceiling on a process's open files
/// (`fs.nr_open`), which no open-file limit can exceed.
pub const CONNECTION_LIMIT_MAX: u32 = 1024 * 1024;
/// Longest provider key window, in hours (a year). Stripe keeps keys for at least 24 hours.
pub const KEY_WINDOW_HOURS_MAX: u32 = 24 * 365;
/// Taken off an upstream's idempotency-key window before the sweeper relies on it to re-send
/// an unknown intent with the same key: clock skew between the gateway and the provider (NTP
/// keeps it under a second; a drifting VM or a provider that counts from its own receipt
/// can be minutes off) and the time a request takes to get there. The gate also requires
/// the whole re-send, retries included, to end inside what is left. An hour of Stripe's 24
/// costs little: a re-send refused for lateness leaves the intent unknown, while one sent
/// after the provider forgot the key could pay out twice. A window of an hour or less
/// leaves nothing, and such a tool is never re-sent.
pub const RESEND_WINDOW_MARGIN: std::time::Duration = std::time::Duration::from_secs(60 * 60);
/// Shortest re-send backoff, in milliseconds: a provider that just timed out gets at least
/// this long before the same request comes again.
pub const RESOLUTION_BACKOFF_MIN_MS: u64 = 100;
/// Longest re-send backoff, in milliseconds (a day, the usual key window).
pub const RESOLUTION_BACKOFF_MAX_MS: u64 = 24 * 60 * 60 * 1000;
/// Highest re-send rate per tool and process.
pub const RESENDS_PER_SECOND_MAX: u32 = 10_000;
/// Longest `Retry-After` cap, in milliseconds. A retry that waits longer than a tool's
/// timeout helps nobody.
pub const RETRY_AFTER_CAP_MS_MAX: u64 = 10 * 60 * 1000;
/// Longest reconciliation window and interval, in seconds: 30 days, the default retention.
/// A longer window compares records the ledger has already purged.
pub const RECONCILE_SECONDS_MAX: u32 = 30 * 24 * 60 * 60;
/// Longest duplicate-call alert window, in seconds (a day): an alert is for a storm in
/// progress, not for history (reconciliation covers that).
pub const ALERT_WINDOW_SECONDS_MAX: u32 = 24 * 60 * 60;
/// Highest alert threshold: the timestamps of one window are kept per intent, up to this.
pub const ALERT_THRESHOLD_MAX: u32 = 100_000;
/// Most alert rules per tool.
pub const ALERT_RULES_MAX: usize = 16;
