//! The checks of the gateway's own settings: `gateway` (listen address, origins, ledger and
//! limits), `owners` (where notices go), `reconcile` and each tool's duplicate-call `alerts`.

use std::collections::BTreeMap;

use intentgate_config_file::at;
use intentgate_config_file::{
    AlertRule, GatewayConfig, OwnerConfig, ReconcileConfig, ResolutionConfig,
};
use intentgate_core::Effect;

use super::Checker;
use super::upstreams::check_url;
use crate::limits::*;

impl Checker<'_, '_> {
    pub(super) fn gateway(&mut self, gateway: &GatewayConfig) {
        if let Err(error) = intentgate_core::Tenant::parse(&gateway.tenant) {
            self.push(
                &at!["gateway", "tenant"],
                format!("`tenant`: {error}"),
                "write a short identifier, e.g. `tenant: default`",
            );
        }
        for (index, origin) in gateway.allowed_origins.iter().enumerate() {
            if let Err(reason) = check_origin(origin) {
                self.push(
                    &at!["gateway", "allowed_origins", index],
                    format!("`{origin}` is not a web origin: {reason}"),
                    "write a scheme, host and optional port, e.g. https://console.example.com",
                );
            }
        }
        for (index, proxy) in gateway.trusted_proxies.iter().enumerate() {
            if crate::auth::parse_network(proxy).is_none() {
                self.push(
                    &at!["gateway", "trusted_proxies", index],
                    format!("`{proxy}` is not an IP address or network"),
                    "write the proxy's address (`10.0.0.7`, `::1`) or network (`10.1.0.0/16`)",
                );
            }
        }
        if gateway.ledger.trim().is_empty() {
            self.push(
                &at!["gateway", "ledger"],
                "`ledger` is empty",
                "write the path of the SQLite file, e.g. `ledger: intentgate.db`",
            );
        }
        self.range(
            &at!["gateway", "retention_days"],
            gateway.retention_days.into(),
            1,
            RETENTION_DAYS_MAX.into(),
            "days (intents must outlive the provider's key window; 30 is the default)",
        );
        self.range(
            &at!["gateway", "body_limit_bytes"],
            gateway.body_limit_bytes,
            BODY_LIMIT_BYTES_MIN,
            BODY_LIMIT_BYTES_MAX,
            "bytes (1048576 is the default)",
        );
        self.range(
            &at!["gateway", "concurrency_limit"],
            gateway.concurrency_limit.into(),
            1,
            CONCURRENCY_LIMIT_MAX.into(),
            "requests (256 is the default)",
        );
        self.range(
            &at!["gateway", "shutdown_grace_ms"],
            gateway.shutdown_grace_ms,
            0,
            SHUTDOWN_GRACE_MS_MAX,
            "milliseconds (30000 is the default)",
        );
        self.range(
            &at!["gateway", "header_read_timeout_ms"],
            gateway.header_read_timeout_ms,
            HEADER_READ_TIMEOUT_MS_MIN,
            HEADER_READ_TIMEOUT_MS_MAX,
            "milliseconds (10000 is the default)",
        );
        self.range(
            &at!["gateway", "body_read_timeout_ms"],
            gateway.body_read_timeout_ms,
            BODY_READ_TIMEOUT_MS_MIN,
            BODY_READ_TIMEOUT_MS_MAX,
            "milliseconds (10000 is the default)",
        );
        self.range(
            &at!["gateway", "idle_timeout_ms"],
            gateway.idle_timeout_ms,
            IDLE_TIMEOUT_MS_MIN,
            IDLE_TIMEOUT_MS_MAX,
            "milliseconds (60000 is the default)",
        );
        self.range(
            &at!["gateway", "connection_limit"],
            gateway.connection_limit.into(),
            1,
            CONNECTION_LIMIT_MAX.into(),
            "connections (4096 is the default)",
        );
        if let Some(per_address) = gateway.connection_limit_per_address {
            self.range(
                &at!["gateway", "connection_limit_per_address"],
                per_address.into(),
                1,
                CONNECTION_LIMIT_MAX.into(),
                "connections (a quarter of connection_limit is the default)",
            );
        }
    }

    /// Reports `value` outside `min..=max` at `path`.
    pub(super) fn reconcile(&mut self, reconcile: &ReconcileConfig) {
        for (field, value, min) in [
            ("every_seconds", reconcile.every_seconds, 0),
            ("window_seconds", reconcile.window_seconds, 1),
            ("unknown_grace_seconds", reconcile.unknown_grace_seconds, 0),
            ("settle_seconds", reconcile.settle_seconds, 0),
        ] {
            self.range(
                &at!["reconcile", field],
                value.into(),
                min,
                RECONCILE_SECONDS_MAX.into(),
                "seconds",
            );
        }
        if reconcile.every_seconds > 0 && reconcile.window_seconds < reconcile.every_seconds {
            self.push(
                &at!["reconcile", "window_seconds"],
                format!(
                    "`window_seconds` is {}, shorter than `every_seconds` ({}): effects between two runs would never be compared",
                    reconcile.window_seconds, reconcile.every_seconds
                ),
                format!(
                    "set `window_seconds` to at least {}",
                    reconcile.every_seconds
                ),
            );
        }
    }

    /// Checks the re-send backoff: a pause of at least 100 ms, a ceiling no lower than the
    /// first pause and no longer than a day, and a bounded rate.
    pub(super) fn resolution(&mut self, resolution: &ResolutionConfig) {
        self.range(
            &at!["resolution", "backoff_initial_ms"],
            resolution.backoff_initial_ms,
            RESOLUTION_BACKOFF_MIN_MS,
            RESOLUTION_BACKOFF_MAX_MS,
            "milliseconds",
        );
        self.range(
            &at!["resolution", "backoff_max_ms"],
            resolution.backoff_max_ms,
            RESOLUTION_BACKOFF_MIN_MS,
            RESOLUTION_BACKOFF_MAX_MS,
            "milliseconds",
        );
        self.range(
            &at!["resolution", "resends_per_second"],
            resolution.resends_per_second.into(),
            0,
            RESENDS_PER_SECOND_MAX.into(),
            "re-sends a second",
        );
        if resolution.backoff_max_ms < resolution.backoff_initial_ms {
            self.push(
                &at!["resolution", "backoff_max_ms"],
                format!(
                    "`backoff_max_ms` is {}, shorter than `backoff_initial_ms` ({}): the pause could never grow",
                    resolution.backoff_max_ms, resolution.backoff_initial_ms
                ),
                format!(
                    "set `backoff_max_ms` to at least {}",
                    resolution.backoff_initial_ms
                ),
            );
        }
    }

    /// Checks a tool's alert rules and fills in the defaults.
    pub(super) fn alerts(
        &mut self,
        index: usize,
        label: &str,
        effect: Option<Effect>,
        alerts: Option<Vec<AlertRule>>,
    ) -> Vec<AlertRule> {
        let Some(rules) = alerts else {
            return match effect {
                Some(Effect::SideEffect) => AlertRule::defaults(),
                _ => Vec::new(),
            };
        };
        if !rules.is_empty() && matches!(effect, Some(Effect::Read | Effect::Idempotent)) {
            self.push(
                &at!["tools", index, "alerts"],
                format!("{label} has alert rules, but only side-effecting tools have intents whose calls repeat"),
                "remove `alerts:` from this tool",
            );
        }
        if rules.len() > ALERT_RULES_MAX {
            self.push(
                &at!["tools", index, "alerts"],
                format!(
                    "{label} has {} alert rules; at most {ALERT_RULES_MAX}",
                    rules.len()
                ),
                "keep one or two rules per scope",
            );
        }
        let mut names = std::collections::HashSet::new();
        for (rule_index, rule) in rules.iter().enumerate() {
            self.range(
                &at!["tools", index, "alerts", rule_index, "threshold"],
                rule.threshold.into(),
                1,
                ALERT_THRESHOLD_MAX.into(),
                "repeated calls",
            );
            self.range(
                &at!["tools", index, "alerts", rule_index, "window_seconds"],
                rule.window_seconds.into(),
                1,
                ALERT_WINDOW_SECONDS_MAX.into(),
                "seconds",
            );
            let name = rule.name();
            let valid = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !valid {
                self.push(
                    &at!["tools", index, "alerts", rule_index, "name"],
                    format!("{label}: alert rule name `{name}` is not 1 to 64 letters, digits, `_`, `-` or `.`"),
                    "name the rule with a short identifier, e.g. `name: refund-storm`",
                );
            } else if !names.insert(name.clone()) {
                self.push(
                    &at!["tools", index, "alerts", rule_index],
                    format!("{label} has two alert rules named `{name}`"),
                    "give each rule its own `name:`",
                );
            }
        }
        rules
    }

    pub(super) fn owners(&mut self, owners: &BTreeMap<String, OwnerConfig>) {
        for (name, owner) in owners {
            if let Some(webhook) = &owner.webhook
                && let Err(reason) = check_url(webhook)
            {
                self.push(
                    &at!["owners", name, "webhook"],
                    format!("webhook of owner `{name}` is not a usable URL: {reason}"),
                    "write an http or https URL, e.g. `webhook: https://hooks.example.com/intentgate`",
                );
            }
            if owner.webhook.is_none() && !owner.log {
                self.push(
                    &at!["owners", name],
                    format!("owner `{name}` would hear about nothing: it has no webhook and `log: false`"),
                    "add `webhook: https://...` or set `log: true`",
                );
            }
        }
    }
}

/// Why `text` can't serve as a base URL or webhook. The reason never quotes the URL (the
/// parser's messages don't either): it may come from the environment and hold a secret.
/// A web origin as browsers send it: `scheme://host[:port]`, nothing after.
pub(super) fn check_origin(text: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(text).map_err(|error| error.to_string())?;
    if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
        return Err("it needs an http or https scheme and a host".to_owned());
    }
    if text.trim_end_matches('/') != url.origin().ascii_serialization() {
        return Err("it has a path, query, user or other part an origin lacks".to_owned());
    }
    Ok(())
}
