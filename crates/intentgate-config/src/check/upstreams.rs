//! The checks of `upstreams`: base URLs, idempotency headers and the headers every request
//! to an upstream carries (`${NAME}` references resolved here, never shown in an error), and
//! whether a request names an upstream that exists.

use std::collections::BTreeMap;

use intentgate_config_file::at;
use intentgate_config_file::env;
use intentgate_config_file::source_map::Segment;
use intentgate_http::spec::UpstreamSpec;

use super::{Checker, names};
use crate::limits::*;

impl Checker<'_, '_> {
    pub(super) fn upstreams(
        &mut self,
        upstreams: BTreeMap<String, UpstreamSpec>,
    ) -> BTreeMap<String, UpstreamSpec> {
        let mut resolved = BTreeMap::new();
        for (name, mut upstream) in upstreams {
            let base = at!["upstreams", &name];
            let field = format!("upstreams.{name}.base_url");
            if let Some(url) = self.resolve(
                &at!["upstreams", &name, "base_url"],
                &field,
                &upstream.base_url,
            ) {
                if let Err(reason) = check_url(&url) {
                    let written = &upstream.base_url;
                    let message = if env::has_reference(written) {
                        format!(
                            "`{field}` (`{written}`, resolved from the environment) is not a usable URL: {reason}"
                        )
                    } else {
                        format!("`{field}` `{written}` is not a usable URL: {reason}")
                    };
                    self.push(
                        &at!["upstreams", &name, "base_url"],
                        message,
                        "write an http or https URL with a host, e.g. `base_url: https://api.example.com`",
                    );
                }
                upstream.base_url = url;
            }
            let headers = std::mem::take(&mut upstream.headers);
            upstream.headers = self.headers(&base, &format!("upstreams.{name}"), headers, false);
            if !is_token(&upstream.idempotency_header) {
                self.push(
                    &at!["upstreams", &name, "idempotency_header"],
                    format!("`{}` is not a header name", upstream.idempotency_header),
                    "write a header name such as `Idempotency-Key`",
                );
            }
            self.range(
                &at!["upstreams", &name, "key_window_hours"],
                upstream.key_window_hours.into(),
                1,
                KEY_WINDOW_HOURS_MAX.into(),
                "hours (the provider's documented key retention; Stripe: 24)",
            );
            self.range(
                &at!["upstreams", &name, "retry_after_cap_ms"],
                upstream.retry_after_cap_ms,
                0,
                RETRY_AFTER_CAP_MS_MAX,
                "milliseconds",
            );
            resolved.insert(name, upstream);
        }
        resolved
    }

    /// Checks header names and resolves header values. `base` is the path of the mapping
    /// that holds `headers`; `templates` is true for a tool's headers, which are templates.
    pub(super) fn headers(
        &mut self,
        base: &[Segment<'_>],
        field: &str,
        headers: BTreeMap<String, String>,
        templates: bool,
    ) -> BTreeMap<String, String> {
        let mut resolved = BTreeMap::new();
        for (name, written) in headers {
            let mut path: Vec<Segment<'_>> = base.to_vec();
            path.push(Segment::Key("headers"));
            path.push(Segment::Key(&name));
            if !is_token(&name) {
                let at = self.map.key(&path);
                self.errors.push(
                    at,
                    format!("`{name}` in `{field}.headers` is not a header name"),
                    "use letters, digits and `-`, e.g. `Authorization`",
                );
            }
            let field = format!("{field}.headers.{name}");
            let Some(value) = self.resolve(&path, &field, &written) else {
                continue;
            };
            if value.chars().any(|c| c.is_control() && c != '\t') {
                self.push(
                    &path,
                    format!("`{field}` contains a line break or control character"),
                    "header values are one line: check the value (and any variable it uses)",
                );
            } else if templates && braces(&value) > braces(&env::without_references(&written)) {
                // The value would be read as a template, so a brace in a secret would be
                // taken for a placeholder (and could end up in an error message).
                self.push(
                    &path,
                    format!("a variable used in `{field}` holds `{{` or `}}`, which the header template would read as a placeholder"),
                    "use a value without braces, or move the header to the upstream's `headers`",
                );
            }
            resolved.insert(name, value);
        }
        resolved
    }

    pub(super) fn upstream_exists(
        &mut self,
        path: &[Segment<'_>],
        label: &str,
        upstream: &str,
        upstreams: &BTreeMap<String, UpstreamSpec>,
    ) {
        if upstreams.contains_key(upstream) {
            return;
        }
        let fix = if upstreams.is_empty() {
            format!(
                "add an upstream under `upstreams:`, e.g. `{upstream}: {{base_url: https://api.example.com}}`"
            )
        } else {
            format!(
                "use one of: {}, or add `{upstream}:` under `upstreams:`",
                names(upstreams.keys())
            )
        };
        self.push(
            path,
            format!("{label} uses upstream `{upstream}`, which is not in `upstreams`"),
            fix,
        );
    }
}

pub(super) fn check_url(text: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(text).map_err(|error| error.to_string())?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("its scheme is not http or https".to_owned());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("it has no host".to_owned());
    }
    if url.fragment().is_some() {
        return Err("it has a `#` fragment, which is never sent".to_owned());
    }
    Ok(())
}

/// Header values with their `${NAME}` references removed.
pub(super) fn without_references(headers: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    headers
        .iter()
        .map(|(name, value)| (name.clone(), env::without_references(value)))
        .collect()
}

/// An HTTP header name (RFC 9110 token).
pub(super) fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn braces(text: &str) -> usize {
    text.chars().filter(|c| matches!(c, '{' | '}')).count()
}
