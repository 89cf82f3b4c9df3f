//! Named limits shared by every layer. Each one bounds something that a caller controls, so
//! that no input can grow a row, a key or a message without bound.

/// Longest tenant name. Tenants are identifiers chosen by operators, not free text.
pub const TENANT_LENGTH_MAX: usize = 128;
/// Longest tool name; MCP clients show tool names in narrow lists.
pub const TOOL_NAME_LENGTH_MAX: usize = 128;
/// Longest rendered intent key. Providers cap idempotency keys (Stripe: 255 characters);
/// intentgate derives the provider key from this, so it stays well below a database index's
/// comfortable size too.
pub const INTENT_KEY_LENGTH_MAX: usize = 512;
/// Longest application intent id (`Intent-Id` header, MCP `_meta`).
pub const INTENT_ID_LENGTH_MAX: usize = 256;
/// Longest key a caller chooses for one operation (the HTTP `Idempotency-Key` header),
/// which the ledger keeps bound to the intent it named. The IETF draft sets no limit; a
/// UUID is 36 characters, and this is as long as an intent key may be, so that a caller
/// may send one of those as its key.
pub const CALLER_KEY_LENGTH_MAX: usize = 512;
/// Largest serialised arguments object stored with an intent.
pub const ARGUMENTS_BYTES_MAX: usize = 64 * 1024;
/// Largest stored upstream result or rejection.
pub const RESULT_BYTES_MAX: usize = 64 * 1024;
/// Longest external id (the provider's id for the effect).
pub const EXTERNAL_ID_LENGTH_MAX: usize = 256;
/// Longest free-text detail in an event row (reasons, error summaries).
pub const EVENT_DETAIL_LENGTH_MAX: usize = 4096;
/// Longest lease owner id (`<instance>/<sequence>`).
pub const LEASE_OWNER_LENGTH_MAX: usize = 128;
/// Longest "who" of a manual resolution.
pub const ACTOR_LENGTH_MAX: usize = 256;
/// Most decimal places a key template may declare; money needs 2 to 4, 18 is generous.
pub const DECIMAL_PLACES_MAX: u32 = 18;
/// Most significant digits accepted in an exact decimal. Covers every money amount and every
/// integer a JSON number can hold without rounding.
pub const DECIMAL_DIGITS_MAX: usize = 40;
/// Most decimal places of an exact decimal (digits after the point, leading zeros included).
/// Every number an `f64`-based client writes fits (the smallest, `5e-324`, has 324), so keys
/// and fingerprints of such numbers stay as they were; it bounds the text a tiny value such as
/// `1e-9223372036854775807` would otherwise be written out as.
pub const DECIMAL_SCALE_MAX: u32 = 400;
/// Longest piece of a caller's value quoted in an error message: enough to recognise an
/// amount (`49.0049999999999999`), short enough that a huge value can't flood a message.
pub const QUOTED_VALUE_LENGTH_MAX: usize = 100;
