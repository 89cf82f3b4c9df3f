//! The smoke test behind `intentgate smoke`: a deploy gate that proves, tool by tool, that
//! retries can't repeat an effect.
//!
//! For every side-effecting tool of a config it builds a real `Gate` (the one `serve` builds,
//! over a fresh SQLite ledger in a temporary folder), makes valid arguments from the tool's
//! input schema (`arguments.rs`), requests the effect while injecting an ambiguous failure
//! (the provider commits, the answer is lost), asks again the way a user and a framework
//! would (3 repeats one after another, 3 at once), and checks that every answer is `done`
//! or `already_done` and that the provider holds exactly one effect for the intent.
//!
//! Then it checks the tool's `lookup` the way the gate calls it after an ambiguous failure
//! (with the intent's provider key, intent key and arguments): it makes the effects of
//! intents that differ from one another in one business field of the key each (or only in
//! the application's intent id), and of each asks the lookup, which must find that intent's
//! own effect (the id its call answered) and never another's; and it asks the lookup of
//! intents that were never executed, which must find nothing. A lookup that settles an
//! intent with somebody else's effect (docs/design.md section 5, "What counts as found") fails the
//! tool, with what to add to the config (`key`, `match`, a `{idempotency_key}` filter).
//!
//! Last it switches the tool off in the ledger, checks a call is answered `disabled` within
//! 1.5 s without reaching the provider, switches it on and checks a call works again.
//!
//! The provider is the built-in mock (in this process, its upstreams' base URLs replaced by
//! the mock's; the failure is scripted; speaking its own JSON API or, for a config written
//! for Stripe, Stripe's dialect: [`smoke_with`]) unless `--live`: then the configured upstreams (a
//! sandbox) are used as they are, behind a loopback proxy (`proxy.rs`) that cuts the answer
//! to the first side-effecting request, and effects are counted through the tool's `list`
//! (by the provider key, `fields.idempotency_key`, or by the business fields of its
//! `match`). A tool without a `list` is counted through its `lookup`, which finds one record
//! at most: it proves the effect happened, not that it happened once, and the report says so
//! for that tool. The lookups are sent to the upstreams as configured, never through the
//! proxy.

mod arguments;
mod lookup;
mod proxy;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use comfy_table::Table;
use intentgate_config::{HashKeySource, LoadedConfig, ToolConfig};
use intentgate_core::key::provider_key;
use intentgate_core::{CallStatus, Effect, Executor, ToolDefinition};
use intentgate_gate::{
    CallContext, CallOutcome, Clock, Gate, GateOptions, LookupOutcome, SystemClock, Upstream,
    UpstreamCall,
};
use intentgate_http::HttpUpstream;
use intentgate_http::spec::{CallSpec, Method, UpstreamSpec};
use intentgate_ledger::{Ledger, ToolFlag};
use intentgate_mock::{
    Dialect, HttpFaultPlan, MockOptions, MockProvider, MockServer, Scripted, Shape,
};
use intentgate_ops::reconcile::Pairing;
use serde::Serialize;
use serde_json::Value;

use proxy::FaultProxy;

/// Calls made one after another after the ambiguous failure: the user asking again, the
/// model retrying.
const REPEATS_SEQUENTIAL: usize = 3;
/// Calls made at once after those: a framework re-running a step while another runs.
const REPEATS_CONCURRENT: usize = 3;
/// How long a switched-off tool may still run: the gate trusts its cached flags for
/// `FLAG_REFRESH` (500 ms); three times that is the promise "within a second" with margin.
const KILL_SWITCH_WAIT: Duration = Duration::from_millis(1500);
/// Pause between calls while waiting for a flag to be seen.
const KILL_SWITCH_POLL: Duration = Duration::from_millis(50);
/// Added to twice a tool's timeout to bound one call: a caller that waits for another's
/// lease waits the timeout plus the gate's margin, then answers from the ledger.
const CALL_MARGIN: Duration = Duration::from_secs(5);
/// The window of provider records counted in `--live` reaches this far around the run, for
/// clocks that disagree a little.
const LIST_WINDOW_MARGIN_MS: i64 = 5 * 60 * 1000;
/// Records per page when counting a sandbox's records (the mock's and Stripe's maximum is
/// higher; this keeps a page small).
const LIST_PAGE_LIMIT: u32 = 100;
/// Most pages read to count one intent's records: the window only spans this run.
const LIST_PAGES_MAX: u32 = 1000;
/// Longest wait for one page of a list.
const LIST_PAGE_TIMEOUT: Duration = Duration::from_secs(30);
/// The write requests the built-in mock serves in its own dialect.
const MOCK_SIDE_EFFECTS: [&str; 3] = ["/v1/refunds", "/v1/charges", "/v1/emails"];
/// The write requests the built-in mock serves in the Stripe dialect.
const MOCK_STRIPE_SIDE_EFFECTS: [&str; 2] = ["/v1/refunds", "/v1/payment_intents"];

/// The side-effecting paths the built-in mock serves in `dialect`.
fn mock_side_effects(dialect: Dialect) -> &'static [&'static str] {
    match dialect {
        Dialect::Json => &MOCK_SIDE_EFFECTS,
        Dialect::Stripe => &MOCK_STRIPE_SIDE_EFFECTS,
    }
}
/// The arguments' variants of the lookup check: the first intent's, the value a key argument
/// takes in the intent that differs from it there, and in the one never executed. (1 and 2
/// are the intents of the effect and kill-switch checks.)
const LOOKUP_FIRST_VARIANT: u32 = 3;
const LOOKUP_OTHER_VARIANT: u32 = 4;
const LOOKUP_NEVER_VARIANT: u32 = 5;

/// Why a client-executed tool is not smoke-tested.
fn client_tool_skipped(name: &str) -> String {
    format!(
        "executed by the caller's own code (`executor: client`): the gateway sends no request \
for it, so there is no effect here to fail and repeat; test the caller's code against the \
intent API (POST /v1/tools/{name}/intents) instead"
    )
}

/// Smoke-tests every side-effecting tool of the config at `config_path`: against the
/// built-in mock provider, or with `live` against the configured upstreams behind a
/// fault-injecting proxy. An error is a smoke that could not run (a refused config, a ledger
/// that can't be opened); a failed check is in the report.
pub async fn smoke(config_path: &Path, live: bool) -> anyhow::Result<Report> {
    smoke_with(config_path, live, Dialect::Json).await
}

/// [`smoke`], with the built-in mock provider speaking `dialect` (`Dialect::Stripe` for a
/// config written for Stripe's v1 API, such as `examples/stripe.yaml`); ignored with `live`.
pub async fn smoke_with(
    config_path: &Path,
    live: bool,
    dialect: Dialect,
) -> anyhow::Result<Report> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let started = Instant::now();
    // A config the loader refuses (a key that changes per attempt, among others) can't be
    // smoke-tested: status 1, with every error and its fix.
    // The ledger is thrown away afterwards: without INTENTGATE_HASH_KEY (or whatever
    // `gateway.hash_key` names) a random key hashes the sensitive arguments.
    let hash_key = HashKeySource::EnvironmentOrEphemeral(intentgate_runtime::ephemeral_hash_key()?);
    let mut loaded =
        intentgate_config::load_file_with(config_path, &hash_key).map_err(|errors| {
            anyhow::anyhow!("the config was refused, so no tool could be smoke-tested:\n{errors}")
        })?;
    // The smoke test proves each side effect happens once under a storm of retries; an
    // approval policy or a budget would hold or refuse its calls instead. Those are the
    // ledger's to enforce, tested with it, so the tools run here without them.
    for tool in &mut loaded.tools {
        tool.policies = None;
    }
    let target = if live {
        Target::live(&mut loaded).await?
    } else {
        Target::mock(&mut loaded, dialect).await?
    };
    let folder = tempfile::tempdir().context("a temporary folder for the smoke test's ledger")?;
    let location = folder.path().join("smoke-ledger.db");
    let ledger = intentgate_ledger::open(
        &location.display().to_string(),
        intentgate_runtime::durability(loaded.config.gateway.durability),
    )
    .await
    .context("opening the smoke test's ledger")?;
    let gate = Arc::new(intentgate_runtime::build_gate_with(
        &loaded,
        ledger.clone(),
        Arc::new(SystemClock),
        GateOptions::default(),
    )?);
    // The lookups of the lookup check (and of counting a tool without a list) go straight to
    // the upstreams: the mock, or the sandbox as configured, never through the proxy.
    let lookup_upstreams = match &target {
        Target::Live { upstreams, .. } => upstreams.clone(),
        Target::Mock(_) => loaded.config.upstreams.clone(),
    };
    let lookups = HttpUpstream::new(lookup_upstreams.clone(), loaded.config.http_tools())
        .context("the tools' lookups")?;
    let mut smoke = Smoke {
        gate,
        ledger,
        target,
        lookups,
        upstreams: lookup_upstreams,
        tag: run_tag(),
        tenant: loaded.config.gateway.tenant.clone(),
        started_ms: SystemClock.now_ms(),
    };
    let mut tools = Vec::new();
    let mut skipped = Vec::new();
    for config in loaded
        .config
        .tools
        .iter()
        .filter(|tool| tool.effect == Effect::SideEffect)
    {
        if config.executor == Executor::Client {
            skipped.push(SkippedTool {
                tool: config.name.clone(),
                reason: client_tool_skipped(&config.name),
            });
            continue;
        }
        tools.push(smoke.check(config).await);
    }
    let report = Report {
        config: config_path.display().to_string(),
        target: smoke.target.name(),
        mock_dialect: smoke.target.dialect(),
        passed: tools.iter().all(|tool| tool.passed),
        seconds: started.elapsed().as_secs_f64(),
        tools,
        skipped,
    };
    smoke.target.stop().await;
    Ok(report)
}

/// A short text unique to this run, in every generated string, so that runs against one
/// sandbox are different intents.
fn run_tag() -> String {
    let millis = SystemClock.now_ms().unsigned_abs();
    let mut value = (millis ^ u64::from(std::process::id()) << 40) % 36u64.pow(6);
    let mut tag = String::new();
    for _ in 0..6 {
        tag.push(char::from_digit((value % 36) as u32, 36).expect("a base-36 digit"));
        value /= 36;
    }
    tag
}

/// Where the effects happen.
enum Target {
    /// The built-in mock provider in this process; ambiguous failures are scripted.
    Mock(MockServer),
    /// The configured upstreams, each behind its own fault-injecting proxy.
    Live {
        proxies: BTreeMap<String, FaultProxy>,
        /// The upstreams as configured, for counting records without the proxy.
        upstreams: BTreeMap<String, UpstreamSpec>,
        client: reqwest::Client,
    },
}

impl Target {
    async fn mock(loaded: &mut LoadedConfig, dialect: Dialect) -> anyhow::Result<Target> {
        let options = MockOptions::new(HttpFaultPlan::quiet()).with_dialect(dialect);
        let provider = MockProvider::new(options).context("the mock provider's plan")?;
        let server = MockServer::start(provider)
            .await
            .context("starting the mock provider on a loopback port")?;
        for upstream in loaded.config.upstreams.values_mut() {
            upstream.base_url = server.url();
        }
        Ok(Target::Mock(server))
    }

    async fn live(loaded: &mut LoadedConfig) -> anyhow::Result<Target> {
        let upstreams = loaded.config.upstreams.clone();
        let mut proxies = BTreeMap::new();
        for (name, upstream) in &mut loaded.config.upstreams {
            let proxy = FaultProxy::start(&upstream.base_url).await?;
            upstream.base_url = proxy.url().to_owned();
            proxies.insert(name.clone(), proxy);
        }
        let client = intentgate_http::http_client().context("an HTTP client")?;
        Ok(Target::Live {
            proxies,
            upstreams,
            client,
        })
    }

    fn name(&self) -> &'static str {
        match self {
            Target::Mock(_) => "mock",
            Target::Live { .. } => "live",
        }
    }

    /// What the built-in mock speaks (`json` or `stripe`); none with `--live`.
    fn dialect(&self) -> Option<Dialect> {
        match self {
            Target::Mock(server) => Some(server.provider().dialect()),
            Target::Live { .. } => None,
        }
    }

    /// Side-effecting requests that reached the provider so far.
    fn side_effect_requests(&self) -> u64 {
        match self {
            Target::Mock(server) => server.provider().stats().requests,
            Target::Live { proxies, .. } => proxies.values().map(FaultProxy::side_effects).sum(),
        }
    }

    /// Failures injected so far (live: answers cut by a proxy).
    fn cuts(&self) -> u64 {
        match self {
            Target::Mock(_) => 0,
            Target::Live { proxies, .. } => proxies.values().map(FaultProxy::cuts).sum(),
        }
    }

    /// Makes the next side-effecting request of `tool` commit and lose its answer.
    fn inject(&self, tool: &ToolConfig) {
        match self {
            Target::Mock(server) => server.provider().script([Scripted {
                shape: Shape::Dropped,
                commit: true,
            }]),
            Target::Live { proxies, .. } => {
                let upstream = tool.call.as_ref().map(|call| call.upstream.as_str());
                if let Some(proxy) = upstream.and_then(|upstream| proxies.get(upstream)) {
                    proxy.arm();
                }
            }
        }
    }

    /// Withdraws an injection that no request used, so it can't hit a later call.
    fn withdraw(&self) {
        match self {
            // Only the smoke test uses this provider, and every earlier tool's effects have
            // been counted already: a reset forgets the unused script.
            Target::Mock(server) => server.provider().reset(),
            Target::Live { proxies, .. } => proxies.values().for_each(FaultProxy::disarm),
        }
    }

    async fn stop(self) {
        if let Target::Mock(server) = self {
            let _ = server.stop().await;
        }
    }
}

/// The results of one tool's checks.
#[derive(Debug, Serialize)]
struct ToolResult {
    tool: String,
    passed: bool,
    /// Exactly one effect at the provider for the intent, after the injected failure and
    /// every repeat.
    effect_once: Step,
    /// Every answer `done` or `already_done`, at most one `done`.
    repeats_answered: Step,
    /// The tool's lookup, asked for intents that differ in one business field each, found
    /// each one's own effect and never another's, and nothing for intents never executed
    /// (`skipped` for a tool without a lookup).
    lookup_finds_own: Step,
    /// Off: `disabled` within 1.5 s with nothing sent; on again: the call works.
    kill_switch: Step,
    /// The intent's key, as the gate rendered it.
    #[serde(skip_serializing_if = "Option::is_none")]
    intent_key: Option<String>,
    /// Effects the provider holds for the intent.
    #[serde(skip_serializing_if = "Option::is_none")]
    effects: Option<u64>,
    /// How they were counted: `effect_log` (the mock's), `list` (the tool's list, by the
    /// provider key or `match` fields) or `lookup` (a tool without a list: found is one
    /// effect).
    #[serde(skip_serializing_if = "Option::is_none")]
    effects_counted_by: Option<Counter>,
    /// What a passing check did not prove, one entry per caveat.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
    /// The statuses answered: the first call, then the repeats.
    answers: Vec<String>,
    /// Why a check failed, one entry per failure.
    reasons: Vec<String>,
}

/// Where the effects of an intent are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Counter {
    /// The built-in mock's effect log: every effect, exactly.
    EffectLog,
    /// The tool's `list`: every record of the run's window that pairs with the intent.
    List,
    /// The tool's `lookup`, for a tool without a list: found is one effect, so a duplicate
    /// can't be seen.
    Lookup,
}

impl Counter {
    /// How the effects of `config`'s intents are counted against `target`.
    fn of(target: &Target, config: &ToolConfig) -> Counter {
        match (target, &config.list) {
            (Target::Mock(_), _) => Counter::EffectLog,
            (Target::Live { .. }, Some(_)) => Counter::List,
            (Target::Live { .. }, None) => Counter::Lookup,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Step {
    Pass,
    Fail,
    /// Not run, because an earlier step made it meaningless.
    Skipped,
}

impl Step {
    fn of(passed: bool) -> Step {
        if passed { Step::Pass } else { Step::Fail }
    }

    fn as_str(self) -> &'static str {
        match self {
            Step::Pass => "pass",
            Step::Fail => "FAIL",
            Step::Skipped => "skipped",
        }
    }
}

impl ToolResult {
    fn new(tool: &str) -> ToolResult {
        ToolResult {
            tool: tool.to_owned(),
            passed: false,
            effect_once: Step::Skipped,
            repeats_answered: Step::Skipped,
            lookup_finds_own: Step::Skipped,
            kill_switch: Step::Skipped,
            intent_key: None,
            effects: None,
            effects_counted_by: None,
            notes: Vec::new(),
            answers: Vec::new(),
            reasons: Vec::new(),
        }
    }

    /// A failure before the effect could be requested: every step fails with one reason.
    fn could_not_start(mut self, reason: String) -> ToolResult {
        self.effect_once = Step::Fail;
        self.repeats_answered = Step::Fail;
        self.reasons.push(reason);
        self.finish()
    }

    fn finish(mut self) -> ToolResult {
        // A tool without a lookup skips the lookup check (and fails on its own account, when
        // an ambiguous failure leaves its intent unknown).
        self.passed = self.reasons.is_empty()
            && [self.effect_once, self.repeats_answered, self.kill_switch]
                .iter()
                .all(|step| *step == Step::Pass)
            && self.lookup_finds_own != Step::Fail;
        self
    }
}

struct Smoke {
    gate: Arc<Gate>,
    ledger: Arc<dyn Ledger>,
    target: Target,
    /// The tools' lookups, sent as the gate sends them, to the upstreams without the proxy.
    lookups: HttpUpstream,
    /// Those upstreams (for their idempotency headers, in fixes).
    upstreams: BTreeMap<String, UpstreamSpec>,
    tag: String,
    tenant: String,
    started_ms: i64,
}

impl Smoke {
    /// The smoke test of one tool: the effect with its answer lost, the repeats, the count
    /// of effects at the provider, the lookup and the kill switch, in that order.
    async fn check(&mut self, config: &ToolConfig) -> ToolResult {
        let result = ToolResult::new(&config.name);
        let Some(definition) = self.gate.tool(&config.name).cloned() else {
            return result.could_not_start("the gate did not load this tool".to_owned());
        };
        // Client tools are skipped by `smoke`, before they get here.
        let Some(request) = &config.call else {
            return result.could_not_start(client_tool_skipped(&config.name));
        };
        if let Err(reason) = self.mock_serves(request) {
            return result.could_not_start(reason);
        }
        let arguments = match arguments::generate(&definition.input_schema, 1, &self.tag) {
            Ok(arguments) => arguments,
            Err(error) => {
                return result.could_not_start(format!(
                    "can't make valid arguments from the input schema: {error}"
                ));
            }
        };
        let intent = Intent {
            definition: &definition,
            arguments: &arguments,
            context: &self.context(&definition, 1),
        };
        match self.check_effect(config, &intent, result).await {
            Ok(result) => result.finish(),
            Err(result) => result,
        }
    }

    /// Steps 1 to 5 of [`Smoke::check`] for an intent with valid arguments; `Err` holds a
    /// result that could not start.
    async fn check_effect(
        &self,
        config: &ToolConfig,
        intent: &Intent<'_>,
        mut result: ToolResult,
    ) -> Result<ToolResult, ToolResult> {
        // 1. The effect, with its answer lost after the provider committed.
        let (first, injected) = match self
            .call_with_answer_lost(config, intent, &mut result)
            .await
        {
            Ok(first) => first,
            Err(reason) => return Err(result.could_not_start(reason)),
        };
        result.intent_key = first.intent_key.clone();

        // 2. Asked again: one after another, then at once.
        let answers = match self.call_again(intent, first).await {
            Ok(answers) => answers,
            Err(reason) => return Err(result.could_not_start(reason)),
        };
        judge_repeats(config, &answers, injected, &mut result);

        // 3. Exactly one effect at the provider.
        self.check_effect_once(config, intent, &mut result).await;

        // 4. The lookup: each intent's finds its own effect, never another's.
        if let Some(lookup) = &config.lookup {
            let checked = self.check_lookup(intent.definition, lookup).await;
            result.lookup_finds_own = Step::of(checked.problems.is_empty());
            let fixes = checked.fixes(config, lookup, intent.definition, &self.upstreams);
            result.notes.extend(checked.notes);
            result.reasons.extend(
                checked
                    .problems
                    .into_iter()
                    .map(|problem| format!("lookup: {}", problem.text)),
            );
            result
                .reasons
                .extend(fixes.into_iter().map(|fix| format!("lookup: fix: {fix}")));
        }

        // 5. The kill switch.
        match self
            .kill_switch(config, intent.definition, intent.arguments, intent.context)
            .await
        {
            Ok(()) => result.kill_switch = Step::Pass,
            Err(error) => {
                result.kill_switch = Step::Fail;
                result.reasons.push(format!("kill switch: {error}"));
            }
        }
        Ok(result)
    }

    /// Whether the built-in mock (when it is the target) serves the tool's request; `Err`
    /// says what it serves instead and how to test the tool live.
    fn mock_serves(&self, request: &CallSpec) -> Result<(), String> {
        let Target::Mock(server) = &self.target else {
            return Ok(());
        };
        let dialect = server.provider().dialect();
        let served = mock_side_effects(dialect);
        if request.method == Method::Post && served.contains(&request.path.as_str()) {
            return Ok(());
        }
        let other = match dialect {
            Dialect::Json if MOCK_STRIPE_SIDE_EFFECTS.contains(&request.path.as_str()) => {
                " (in its Stripe dialect it serves that path: `--mock-dialect stripe`)"
            }
            _ => "",
        };
        Err(format!(
            "the built-in mock provider does not serve {} {} (it serves POST {}){other}; \
run `intentgate smoke --live` with the upstream pointed at a sandbox of this tool's API",
            format!("{:?}", request.method).to_uppercase(),
            request.path,
            served.join(", POST ")
        ))
    }

    /// The first call, with the target told to lose its answer after the provider commits:
    /// its outcome, and whether the failure was injected (a reason in `result` if not).
    async fn call_with_answer_lost(
        &self,
        config: &ToolConfig,
        intent: &Intent<'_>,
        result: &mut ToolResult,
    ) -> Result<(CallOutcome, bool), String> {
        let (requests_before, cuts_before) =
            (self.target.side_effect_requests(), self.target.cuts());
        self.target.inject(config);
        let first = self
            .call(intent.definition, intent.arguments, intent.context)
            .await;
        let injected = match self.target {
            Target::Mock(_) => self.target.side_effect_requests() > requests_before,
            Target::Live { .. } => self.target.cuts() > cuts_before,
        };
        if !injected {
            self.target.withdraw();
        }
        let first = first?;
        if first.status == CallStatus::InvalidArguments {
            return Err(format!(
                "the generated arguments {} do not match the input schema: {}",
                intent.arguments,
                first.errors.join("; ")
            ));
        }
        if !injected {
            result.reasons.push(format!(
                "the ambiguous failure was not injected: the first call answered {} without \
sending a side-effecting request through {}",
                first.status.as_str(),
                match self.target {
                    Target::Mock(_) => "the mock provider",
                    Target::Live { .. } => "the proxy (does the call use the configured upstream?)",
                }
            ));
        }
        Ok((first, injected))
    }

    /// The first answer and those of the repeats: `REPEATS_SEQUENTIAL` one after another,
    /// then `REPEATS_CONCURRENT` at once.
    async fn call_again(
        &self,
        intent: &Intent<'_>,
        first: CallOutcome,
    ) -> Result<Vec<CallOutcome>, String> {
        let mut answers = vec![first];
        for _ in 0..REPEATS_SEQUENTIAL {
            answers.push(
                self.call(intent.definition, intent.arguments, intent.context)
                    .await?,
            );
        }
        let mut running = tokio::task::JoinSet::new();
        for _ in 0..REPEATS_CONCURRENT {
            let (gate, definition, arguments, context) = (
                self.gate.clone(),
                intent.definition.clone(),
                intent.arguments.clone(),
                intent.context.clone(),
            );
            running.spawn(async move { call(&gate, &definition, &arguments, &context).await });
        }
        while let Some(joined) = running.join_next().await {
            match joined {
                Ok(outcome) => answers.push(outcome?),
                Err(error) => return Err(format!("a call panicked: {error}")),
            }
        }
        Ok(answers)
    }

    /// Step 3: the provider holds exactly one effect for the intent, counted by the tool's
    /// `list` (or, without one, its `lookup`, which the notes say).
    async fn check_effect_once(
        &self,
        config: &ToolConfig,
        intent: &Intent<'_>,
        result: &mut ToolResult,
    ) {
        let counter = Counter::of(&self.target, config);
        result.effects_counted_by = Some(counter);
        if counter == Counter::Lookup {
            result.notes.push(format!(
                "{} has no `list`, so its effects were counted with its `lookup`, which finds \
one record at most: \"effect once\" shows the effect happened, not that it happened only once \
(a duplicate would go unseen). Add a `list:` block (the provider's records over a window, \
paired with intents by the provider key, `fields.idempotency_key`, or by business fields with \
`match`) to count every record; reconciliation needs it too",
                config.name
            ));
        }
        let Some(key) = result.intent_key.clone() else {
            result.effect_once = Step::Fail;
            result
                .reasons
                .push("the gate answered without an intent key".to_owned());
            return;
        };
        match self
            .count_effects(
                config,
                &Asked {
                    definition: intent.definition,
                    arguments: intent.arguments,
                    context: intent.context,
                    key: &key,
                },
            )
            .await
        {
            Ok(count) => {
                result.effects = Some(count);
                result.effect_once = Step::of(count == 1);
                if count != 1 {
                    result.reasons.push(format!(
                        "the provider holds {count} effects for intent {key}; expected exactly 1"
                    ));
                }
            }
            Err(error) => {
                result.effect_once = Step::Fail;
                result.reasons.push(error);
            }
        }
    }

    /// The call context of a variant: its own intent id where the key uses one, the same
    /// for every repeat of that variant.
    fn context(&self, definition: &ToolDefinition, variant: u32) -> CallContext {
        let uses_intent_id = definition
            .key
            .as_ref()
            .is_some_and(|key| key.uses_intent_id());
        CallContext {
            tenant: self.tenant.clone(),
            intent_id: uses_intent_id.then(|| format!("smoke-{}-{variant}", self.tag)),
            explicit_key: None,
            ..CallContext::default()
        }
    }

    async fn call(
        &self,
        definition: &ToolDefinition,
        arguments: &Value,
        context: &CallContext,
    ) -> Result<CallOutcome, String> {
        call(&self.gate, definition, arguments, context).await
    }

    /// Effects the provider holds for the intent `asked` (as [`Counter::of`] says: with
    /// `--live`, by the tool's list, or by its lookup when it has none).
    async fn count_effects(&self, config: &ToolConfig, asked: &Asked<'_>) -> Result<u64, String> {
        let key = asked.key;
        match &self.target {
            Target::Mock(server) => Ok(server.provider().effect_count(key) as u64),
            Target::Live {
                upstreams, client, ..
            } => {
                let Some(list) = &config.list else {
                    return count_by_lookup(&self.lookups, &self.tenant, config, asked).await;
                };
                let pairing = Pairing::of_match(&list.match_fields);
                let wanted = match &pairing {
                    // Smoke's calls are its configured tenant's, in their first epoch.
                    Pairing::ProviderKey => provider_key(&self.tenant, &config.name, key, 1),
                    Pairing::Fields(fields) => fields.of_arguments(asked.arguments),
                };
                let call_upstream = config.call.as_ref().map(|call| call.upstream.as_str());
                let Some(name) = list.upstream.as_deref().or(call_upstream) else {
                    return Err(format!(
                        "{} has a list but no call, so no upstream",
                        config.name
                    ));
                };
                let upstream = upstreams
                    .get(name)
                    .ok_or_else(|| format!("the list's upstream `{name}` is not configured"))?;
                let until_ms = SystemClock.now_ms() + LIST_WINDOW_MARGIN_MS;
                let mut pager = intentgate_http::list_records(
                    client,
                    upstream,
                    list,
                    self.started_ms - LIST_WINDOW_MARGIN_MS,
                    until_ms,
                    LIST_PAGE_LIMIT,
                )
                .map_err(|error| format!("listing the sandbox's records: {error}"))?;
                let mut count = 0;
                for _ in 0..LIST_PAGES_MAX {
                    let page = tokio::time::timeout(LIST_PAGE_TIMEOUT, pager.next_page())
                        .await
                        .map_err(|_| {
                            format!(
                                "listing the sandbox's records: no page within {} s",
                                LIST_PAGE_TIMEOUT.as_secs()
                            )
                        })?
                        .map_err(|error| format!("listing the sandbox's records: {error}"))?;
                    let Some(page) = page else {
                        return Ok(count);
                    };
                    count += page
                        .iter()
                        .filter(|record| match &pairing {
                            Pairing::ProviderKey => {
                                record.provider_key.as_deref() == Some(wanted.as_str())
                            }
                            Pairing::Fields(fields) => fields.of_record(&record.raw) == wanted,
                        })
                        .count() as u64;
                }
                Err(format!(
                    "listing the sandbox's records: more than {LIST_PAGES_MAX} pages in the \
run's window; can't count them all"
                ))
            }
        }
    }

    /// Off: a call is answered `disabled` within [`KILL_SWITCH_WAIT`] and a new intent sends
    /// nothing; on again: that new intent is done, once.
    async fn kill_switch(
        &self,
        config: &ToolConfig,
        definition: &ToolDefinition,
        arguments: &Value,
        context: &CallContext,
    ) -> Result<(), String> {
        self.set_flag(&config.name, false).await?;
        let checked = self.while_off(config, definition, arguments, context).await;
        // Always on again, whatever happened while it was off.
        self.set_flag(&config.name, true).await?;
        let (arguments, context) = checked?;
        // The gate trusts its cached flags this long; calling earlier only adds `disabled`
        // answers (and their log lines).
        tokio::time::sleep(intentgate_gate::FLAG_REFRESH).await;
        let started = Instant::now();
        let outcome = loop {
            let outcome = self.call(definition, &arguments, &context).await?;
            if outcome.status != CallStatus::Disabled || started.elapsed() >= KILL_SWITCH_WAIT {
                break outcome;
            }
            tokio::time::sleep(KILL_SWITCH_POLL).await;
        };
        if outcome.status != CallStatus::Done {
            return Err(format!(
                "switched back on, a new intent answered {} ({}) instead of done",
                outcome.status.as_str(),
                outcome.message
            ));
        }
        let key = outcome.intent_key.unwrap_or_default();
        let asked = Asked {
            definition,
            arguments: &arguments,
            context: &context,
            key: &key,
        };
        let count = self.count_effects(config, &asked).await?;
        if count != 1 {
            return Err(format!(
                "switched back on, the provider holds {count} effects for the new intent {key}; expected 1"
            ));
        }
        Ok(())
    }

    /// The checks while the tool is off; the new intent's arguments and context.
    async fn while_off(
        &self,
        config: &ToolConfig,
        definition: &ToolDefinition,
        arguments: &Value,
        context: &CallContext,
    ) -> Result<(Value, CallContext), String> {
        let started = Instant::now();
        loop {
            let outcome = self.call(definition, arguments, context).await?;
            if outcome.status == CallStatus::Disabled {
                break;
            }
            if started.elapsed() >= KILL_SWITCH_WAIT {
                return Err(format!(
                    "switched off in the ledger, calls were still answered {} after {} ms",
                    outcome.status.as_str(),
                    KILL_SWITCH_WAIT.as_millis()
                ));
            }
            tokio::time::sleep(KILL_SWITCH_POLL).await;
        }
        // A new intent, which would be executed if the switch did not hold.
        let fresh = arguments::generate(&definition.input_schema, 2, &self.tag)
            .map_err(|error| format!("can't make a second set of arguments: {error}"))?;
        let fresh_context = self.context(definition, 2);
        let before = self.target.side_effect_requests();
        let outcome = self.call(definition, &fresh, &fresh_context).await?;
        let after = self.target.side_effect_requests();
        if outcome.status != CallStatus::Disabled {
            return Err(format!(
                "switched off, a new intent answered {} instead of disabled",
                outcome.status.as_str()
            ));
        }
        if after != before {
            return Err(format!(
                "switched off, a call of {} reached the provider ({} side-effecting requests)",
                config.name,
                after - before
            ));
        }
        Ok((fresh, fresh_context))
    }

    async fn set_flag(&self, tool: &str, enabled: bool) -> Result<(), String> {
        self.ledger
            .set_tool_flag(ToolFlag {
                tool: tool.to_owned(),
                enabled,
                reason: "intentgate smoke: kill-switch check".to_owned(),
                actor: "intentgate smoke".to_owned(),
                updated_ms: SystemClock.now_ms(),
            })
            .await
            .map_err(|error| format!("storing the flag of {tool}: {error}"))
    }
}

/// Step 2's verdict: every answer is done or already_done, at most one of them done, after
/// an injected failure; otherwise why not (for a tool left unknown without a `lookup`, what
/// to add).
fn judge_repeats(
    config: &ToolConfig,
    answers: &[CallOutcome],
    injected: bool,
    result: &mut ToolResult,
) {
    result.answers = answers
        .iter()
        .map(|answer| answer.status.as_str().to_owned())
        .collect();
    let settled = answers
        .iter()
        .all(|answer| matches!(answer.status, CallStatus::Done | CallStatus::AlreadyDone));
    let executed = answers
        .iter()
        .filter(|answer| answer.status == CallStatus::Done)
        .count();
    result.repeats_answered = Step::of(settled && executed <= 1 && injected);
    if !settled {
        let unknown = answers
            .iter()
            .any(|answer| answer.status == CallStatus::PendingUnknown);
        if unknown && config.lookup.is_none() {
            result.reasons.push(format!(
                "{} has no `lookup`: after an ambiguous failure the gateway can't find out \
whether the effect happened, so the intent stays unknown (pending_unknown) until someone \
resolves it. Add a `lookup:` block to the tool: a read-only request that finds the effect and \
proves it is this intent's by the provider key the gateway sent (`{{idempotency_key}}`) and \
by the business fields, e.g. `lookup: {{method: GET, path: /v1/refunds, query: \
{{idempotency_key: \"{{idempotency_key}}\"}}, found: /data, key: /idempotency_key, match: \
{{order_id: {{record: /order_id}}, amount: {{record: /amount}}}}, external_id: /id}}` (where \
the provider does not keep the Idempotency-Key header, send `{{idempotency_key}}` in the \
body's metadata and point `key:` there)",
                config.name
            ));
        } else {
            let first = &answers[0];
            result.reasons.push(format!(
                "expected every answer to be done or already_done; got {} (first answer: {})",
                result.answers.join(", "),
                first.message
            ));
        }
    } else if executed > 1 {
        result.reasons.push(format!(
            "{executed} calls answered done: the effect was executed more than once"
        ));
    }
}

/// One intent of the smoke test, before it is asked for: its tool, arguments and context.
struct Intent<'a> {
    definition: &'a ToolDefinition,
    arguments: &'a Value,
    context: &'a CallContext,
}

/// One intent as the smoke test asked for it: enough to find its effects at the provider.
struct Asked<'a> {
    definition: &'a ToolDefinition,
    arguments: &'a Value,
    context: &'a CallContext,
    /// Its key, as the gate rendered it.
    key: &'a str,
}

/// The effects of the intent `asked` as the tool's lookup sees them: found is 1, not found
/// 0. A lookup answers with one record, so more than one effect can't be seen.
async fn count_by_lookup(
    lookups: &HttpUpstream,
    tenant: &str,
    config: &ToolConfig,
    asked: &Asked<'_>,
) -> Result<u64, String> {
    if config.lookup.is_none() {
        return Err(format!(
            "{} has neither a `list` nor a `lookup`, so the sandbox's effects for the intent \
can't be counted; add a `list:` block (the provider's records over a window), which \
reconciliation needs too, or at least a `lookup:`",
            config.name
        ));
    }
    // As the gate sends it: with the intent's provider key (smoke's intents are its tenant's,
    // in their first epoch).
    let provider_key = provider_key(tenant, &config.name, asked.key, 1);
    let call = UpstreamCall::for_intent(
        asked.definition,
        asked.arguments,
        asked.key,
        Some(&provider_key),
        asked.context.intent_id.as_deref(),
        1,
    );
    match lookups.lookup(call).await {
        LookupOutcome::Found { .. } => Ok(1),
        LookupOutcome::NotFound => Ok(0),
        LookupOutcome::Failed(error) => Err(format!(
            "looking the effect up in the sandbox (the tool has no `list`): {error}"
        )),
        LookupOutcome::Mismatch(reason) => Err(format!(
            "looking the effect up in the sandbox (the tool has no `list`): the lookup found a \
record that is half this intent's, so the effects can't be counted: {reason}"
        )),
        LookupOutcome::Unsupported => Err(format!(
            "{} has no `list`, and its lookup can't be sent, so the sandbox's effects for \
the intent can't be counted",
            config.name
        )),
    }
}

/// One gate call, bounded: twice the tool's timeout (a caller waiting for another's lease
/// waits the timeout plus a margin before answering from the ledger), plus [`CALL_MARGIN`].
async fn call(
    gate: &Gate,
    definition: &ToolDefinition,
    arguments: &Value,
    context: &CallContext,
) -> Result<CallOutcome, String> {
    let bound = definition.timeout * 2 + CALL_MARGIN;
    match tokio::time::timeout(
        bound,
        gate.call(&definition.name, arguments.clone(), context),
    )
    .await
    {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err(error)) => Err(format!("the gate failed: {error}")),
        Err(_) => Err(format!(
            "a call did not answer within {} s",
            bound.as_secs()
        )),
    }
}

/// What a smoke test found: each side-effecting tool's steps and why any failed. Serialised
/// as it is by `intentgate smoke --format json`: the field names are a promise to users.
#[derive(Debug, Serialize)]
pub struct Report {
    config: String,
    /// `mock` (the built-in mock provider) or `live` (the configured upstreams).
    target: &'static str,
    /// What the built-in mock spoke: `json` (its own API) or `stripe`; absent with `live`.
    #[serde(skip_serializing_if = "Option::is_none")]
    mock_dialect: Option<Dialect>,
    passed: bool,
    seconds: f64,
    tools: Vec<ToolResult>,
    /// Side-effecting tools not smoke-tested, each with why.
    skipped: Vec<SkippedTool>,
}

/// A side-effecting tool the smoke test leaves out, and why.
#[derive(Debug, Serialize)]
struct SkippedTool {
    tool: String,
    reason: String,
}

impl Report {
    /// Every tool passed every check.
    pub fn passed(&self) -> bool {
        self.passed
    }

    /// Side-effecting tools smoke-tested.
    pub fn tools_checked(&self) -> usize {
        self.tools.len()
    }

    /// Tools that failed a check.
    pub fn tools_failed(&self) -> usize {
        self.tools.iter().filter(|tool| !tool.passed).count()
    }

    /// The report for a person: what was done, a table of each tool's steps, why any failed,
    /// and the verdict.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let against = match (self.target, self.mock_dialect) {
            ("mock", Some(Dialect::Stripe)) => {
                "the built-in mock provider in its Stripe dialect (Stripe's v1 API)"
            }
            ("mock", _) => "the built-in mock provider",
            _ => "the configured upstreams (--live), through a fault-injecting proxy",
        };
        let _ = writeln!(
            out,
            "smoke test of {} against {against}\nper side-effecting tool: the effect with its \
answer lost after the provider committed, {REPEATS_SEQUENTIAL} repeats one after another and \
{REPEATS_CONCURRENT} at once; the lookup of intents that differ in one field each (each must find \
its own effect, never another's) and of intents never executed (nothing); then the kill \
switch\n",
            self.config
        );
        let mut table = Table::new();
        table
            .load_preset(comfy_table::presets::NOTHING)
            .set_header([
                "tool",
                "effect once",
                "repeats answered",
                "lookup finds own",
                "kill switch",
                "result",
            ]);
        for tool in &self.tools {
            table.add_row([
                tool.tool.as_str(),
                tool.effect_once.as_str(),
                tool.repeats_answered.as_str(),
                tool.lookup_finds_own.as_str(),
                tool.kill_switch.as_str(),
                if tool.passed { "ok" } else { "FAILED" },
            ]);
        }
        // Columns a space apart, the first at the margin, so that each row starts with its
        // tool's name.
        for column in table.column_iter_mut() {
            column.set_padding((0, 1));
        }
        let _ = writeln!(out, "{}", table.trim_fmt());
        for tool in self.tools.iter().filter(|tool| !tool.reasons.is_empty()) {
            let _ = writeln!(out, "\n{} failed:", tool.tool);
            for reason in &tool.reasons {
                let _ = writeln!(out, "    {reason}");
            }
        }
        for tool in self.tools.iter().filter(|tool| !tool.notes.is_empty()) {
            let _ = writeln!(out, "\n{}, note:", tool.tool);
            for note in &tool.notes {
                let _ = writeln!(out, "    {note}");
            }
        }
        for skipped in &self.skipped {
            let _ = writeln!(out, "\n{} skipped: {}", skipped.tool, skipped.reason);
        }
        let passed = self.tools.iter().filter(|tool| tool.passed).count();
        let _ = writeln!(
            out,
            "\n{}: {passed} of {} side-effecting tools passed ({:.1} s)",
            if self.passed { "PASSED" } else { "FAILED" },
            self.tools.len(),
            self.seconds
        );
        out
    }
}
