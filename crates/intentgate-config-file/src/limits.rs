//! Named limits of the config file as read: its size, its nesting, the values of its
//! `${NAME}` references and the number of errors reported. A config is written by an
//! operator, but it may also be generated, templated or fetched, so nothing in it is allowed
//! to grow without bound.

/// Largest config file. A support agent's 14 tools take about 20 KiB; 1 MiB leaves room for
/// hundreds of tools with long schemas, and keeps a wrong path (a log file, a binary) from
/// being read into memory whole.
pub const CONFIG_BYTES_MAX: usize = 1024 * 1024;
/// Deepest nesting of mappings and sequences. Input schemas and body templates nest a few
/// levels; anything deeper is a mistake or an attack on the parser's stack.
pub const CONFIG_DEPTH_MAX: usize = 32;
/// Most YAML nodes (scalars, mappings, sequences) in one file: generous for 1 MiB of config.
pub const CONFIG_NODES_MAX: usize = 200_000;
/// Most aliases (`*name`). Anchors are handy for shared schemas; thousands of aliases are an
/// expansion bomb.
pub const CONFIG_ALIASES_MAX: usize = 1_000;
/// Longest value of one `${NAME}` reference, in bytes. Servers refuse header values past
/// about 8 KiB, so a longer value is a wrong variable, not a credential.
pub const ENV_VALUE_BYTES_MAX: usize = 8 * 1024;
/// Most errors reported for one file. After a hundred, the rest are noise (and a broken
/// generator could otherwise print millions of lines).
pub const ERRORS_MAX: usize = 100;
