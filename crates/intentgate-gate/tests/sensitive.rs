//! Sensitive arguments through a real gate and SQLite file: the provider gets what the caller
//! sent, the ledger only keyed hashes (arguments, key, echoes in results), repeats and
//! conflicts still work, and the sweeper never re-sends what it only has hashes of.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use intentgate_core::{
    CallStatus, HashKey, IntentStatus, ToolDefinition, UpstreamObservation, fingerprint,
};
use intentgate_gate::{
    CallContext, Gate, GateError, GateOptions, LookupOutcome, SystemClock, Upstream, UpstreamCall,
};
use intentgate_ledger::{Ledger, SqliteLedger};
use intentgate_test_support::{TempLedger, send_email_tool};
use serde_json::{Value, json};

const ADDRESS: &str = "alice.liddell@example.com";
const BODY: &str = "Your refund of 49.00 for order 8812 is on its way";

fn email_tool() -> ToolDefinition {
    let schema = json!({
        "type": "object",
        "properties": {
            "to": {"type": "string", "sensitive": true},
            "reference": {"type": "string"},
            "body": {"type": "string", "sensitive": true}
        },
        "required": ["to", "reference", "body"],
        "additionalProperties": false
    });
    let mut tool = send_email_tool(schema, 0);
    tool.hash_key = Some(hash_key());
    // As if its upstream honoured idempotency keys: the sweeper must still not re-send.
    tool.resend_window = Some(Duration::from_secs(3600));
    tool
}

fn hash_key() -> HashKey {
    HashKey::new(b"0123456789abcdef0123456789abcdef-test-key").unwrap()
}

fn email(body: &str) -> Value {
    json!({"to": ADDRESS, "reference": "8812", "body": body})
}

/// An email provider that echoes the recipient back, records what each request carried,
/// and, while `ambiguous` is set, times out without sending and finds nothing.
#[derive(Default)]
struct Provider {
    executed: Mutex<Vec<(Value, Option<String>)>>,
    looked_up: Mutex<Vec<Value>>,
    ambiguous: AtomicBool,
}

#[async_trait]
impl Upstream for Provider {
    async fn execute(&self, call: UpstreamCall<'_>) -> UpstreamObservation {
        self.executed.lock().unwrap().push((
            call.arguments.clone(),
            call.idempotency_key.map(str::to_owned),
        ));
        if self.ambiguous.load(Ordering::SeqCst) {
            return UpstreamObservation::Timeout;
        }
        UpstreamObservation::response(
            200,
            json!({"id": "em_000001", "to": call.arguments["to"], "status": "sent"}),
        )
    }

    async fn lookup(&self, call: UpstreamCall<'_>) -> LookupOutcome {
        self.looked_up.lock().unwrap().push(call.arguments.clone());
        LookupOutcome::NotFound
    }
}

struct Harness {
    dir: tempfile::TempDir,
    ledger: Arc<SqliteLedger>,
    provider: Arc<Provider>,
    gate: Gate,
}

impl Harness {
    fn new() -> Harness {
        let TempLedger { dir, ledger, .. } = TempLedger::inline();
        let provider = Arc::new(Provider::default());
        let options = GateOptions {
            // The sweeper's next lookup is due at once.
            lookup_interval: Duration::from_millis(1),
            ..GateOptions::default()
        };
        let gate = Gate::new(
            vec![email_tool()],
            ledger.clone(),
            provider.clone(),
            Arc::new(SystemClock),
            options,
        )
        .unwrap();
        Harness {
            dir,
            ledger,
            provider,
            gate,
        }
    }

    async fn call(&self, arguments: Value) -> intentgate_gate::CallOutcome {
        self.gate
            .call("send_email", arguments, &CallContext::default())
            .await
            .unwrap()
    }

    /// Every byte the ledger has written: the database file and its WAL.
    fn ledger_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        for entry in std::fs::read_dir(self.dir.path()).unwrap() {
            bytes.extend(std::fs::read(entry.unwrap().path()).unwrap());
        }
        bytes
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[tokio::test]
async fn sensitive_values_reach_the_provider_but_never_the_ledger_file() {
    // Before sensitive arguments, the ledger kept the address and the body in clear in the
    // arguments, the key (`email:alice...`) and the provider's echoed answer.
    let harness = Harness::new();
    let outcome = harness.call(email(BODY)).await;
    assert_eq!(outcome.status, CallStatus::Done, "{outcome:?}");

    let executed = harness.provider.executed.lock().unwrap().clone();
    assert_eq!(executed.len(), 1);
    assert_eq!(
        executed[0].0,
        email(BODY),
        "the provider gets the caller's values"
    );
    let provider_key = executed[0].1.clone().unwrap();
    assert!(!provider_key.contains("alice"), "{provider_key}");

    let key = format!("email:{}:8812", hash_key().key_part(ADDRESS));
    assert_eq!(outcome.intent_key.as_deref(), Some(key.as_str()));
    let intent = harness
        .ledger
        .get("default", "send_email", &key)
        .await
        .unwrap()
        .expect("the intent is kept under the hashed key");
    assert_eq!(
        intent.arguments["to"],
        json!(hash_key().hash_value(&json!(ADDRESS)))
    );
    assert_eq!(
        intent.arguments["body"],
        json!(hash_key().hash_value(&json!(BODY)))
    );
    assert_eq!(intent.arguments["reference"], "8812");
    // A plain SHA-256 of the clear arguments would let a holder of the ledger test guesses
    // of the address against the fingerprint; it is of the hashed arguments.
    assert_ne!(intent.fingerprint, fingerprint(&email(BODY)).as_str());
    assert_eq!(intent.fingerprint, fingerprint(&intent.arguments).as_str());
    // The echo in the stored result is the argument's hash, also in the answer.
    let result = intent.result.unwrap();
    assert_eq!(result["to"], intent.arguments["to"]);
    assert_eq!(result["id"], "em_000001");
    assert_eq!(outcome.result.unwrap()["to"], intent.arguments["to"]);

    let bytes = harness.ledger_bytes();
    assert!(!bytes.is_empty());
    for clear in [ADDRESS, "alice", BODY, "refund of 49.00"] {
        assert!(
            !contains(&bytes, clear),
            "`{clear}` is in the ledger's files"
        );
    }
}

#[tokio::test]
async fn a_repeat_is_already_done_and_a_changed_sensitive_value_is_a_conflict_naming_only_the_field()
 {
    let harness = Harness::new();
    assert_eq!(harness.call(email(BODY)).await.status, CallStatus::Done);
    let repeat = harness.call(email(BODY)).await;
    assert_eq!(repeat.status, CallStatus::AlreadyDone, "{repeat:?}");

    // Before hashing the new value too, the stored hash and the new clear value would always
    // differ; and neither value may be shown.
    let reworded = "Your refund is on its way";
    let conflict = harness.call(email(reworded)).await;
    assert_eq!(conflict.status, CallStatus::Conflict, "{conflict:?}");
    assert_eq!(conflict.differing_fields, ["body"]);
    let shown = serde_json::to_string(&conflict).unwrap();
    for clear in [BODY, reworded, ADDRESS] {
        assert!(!shown.contains(clear), "{shown}");
    }
    assert_eq!(harness.provider.executed.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn the_sweeper_looks_a_sensitive_intent_up_and_never_resends_hashes() {
    // With a resend window, the sweeper would re-send an unknown intent from the stored
    // arguments: hashes in place of the address and the body.
    let harness = Harness::new();
    harness.provider.ambiguous.store(true, Ordering::SeqCst);
    let outcome = harness.call(email(BODY)).await;
    assert_eq!(outcome.status, CallStatus::PendingUnknown, "{outcome:?}");
    tokio::time::sleep(Duration::from_millis(20)).await;

    let report = harness.gate.sweep(10).await.unwrap();
    assert_eq!((report.looked_up, report.resent), (1, 0), "{report:?}");
    assert_eq!(harness.provider.executed.lock().unwrap().len(), 1);
    let looked_up = harness.provider.looked_up.lock().unwrap().clone();
    assert_eq!(looked_up.len(), 2, "the caller's lookup and the sweeper's");
    assert_eq!(
        looked_up[0]["to"], ADDRESS,
        "the caller's lookup has the values"
    );
    assert_eq!(
        looked_up[1]["to"],
        json!(hash_key().hash_value(&json!(ADDRESS))),
        "the sweeper's has only what the ledger keeps"
    );
    let intent = harness.ledger.list(0, 10).await.unwrap().pop().unwrap();
    assert_eq!(intent.status, IntentStatus::Unknown);
}

#[tokio::test]
async fn a_gate_refuses_a_tool_with_sensitive_arguments_and_no_hash_key() {
    // Without the key the arguments could only be stored in clear.
    let TempLedger {
        dir: _dir, ledger, ..
    } = TempLedger::inline();
    let mut tool = email_tool();
    tool.hash_key = None;
    let error = Gate::new(
        vec![tool],
        ledger,
        Arc::new(Provider::default()),
        Arc::new(SystemClock),
        GateOptions::default(),
    )
    .err()
    .expect("refused");
    assert!(matches!(error, GateError::Definition(_)), "{error}");
    assert!(error.to_string().contains("INTENTGATE_HASH_KEY"), "{error}");
}
