//! Who is calling, beyond the arguments: what every entry of the call path is given.

/// Who is calling, beyond the arguments.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// The tenant the call is made in: every key is scoped by it. Comes from the caller's
    /// credential, never from a value the caller chooses (docs/design.md section 4).
    /// Checked before the ledger sees it (`Tenant::parse`).
    pub tenant: String,
    /// The application's intent id, for tools whose key uses `{intent_id}` (and the
    /// requests that send it).
    pub intent_id: Option<String>,
    /// The key the caller chose for this operation (the HTTP API's IETF `Idempotency-Key`
    /// header). It never replaces the intent key, which is the tool's business key: for a
    /// key template that uses `{intent_id}` it is the intent id (an `intent_id` that
    /// disagrees is `invalid_arguments`), and for every side effect it is bound, within the
    /// tenant and the tool, to the intent its first call named ([`Ledger::bind_caller_key`](intentgate_ledger::Ledger::bind_caller_key)).
    /// A later call under it that names another intent (another business key, or other
    /// arguments) is refused with [`GateError::IdempotencyKeyReused`](crate::GateError::IdempotencyKeyReused), nothing recorded or
    /// executed; the same intent under a second key is one intent, as any repeat. Reads and
    /// idempotent tools record no intent and ignore it. At most `CALLER_KEY_LENGTH_MAX`
    /// bytes, not empty: another is `invalid_arguments`.
    pub explicit_key: Option<String>,
    /// Who is calling: the credential's subject (`Principal::subject`), never the
    /// credential. An intent held for approval remembers it, and it may never approve that
    /// intent (docs/design.md section 13).
    pub caller: String,
}

impl Default for CallContext {
    fn default() -> CallContext {
        CallContext {
            tenant: "default".to_owned(),
            intent_id: None,
            explicit_key: None,
            caller: "anonymous".to_owned(),
        }
    }
}
