//! Who is calling: the tenant a call belongs to and what the caller may do.
//!
//! The tenant scopes every intent (`(tenant, tool, key)`), so it decides whether two calls
//! are one refund or two. It must therefore come from the caller's credential, never from a
//! value the caller may pick: the edge of each transport authenticates a request once and
//! hands a [`Principal`] to everything behind it. Tenant names are identifiers checked here,
//! so that a malformed one is refused where it arrives, with a message, instead of failing a
//! database constraint later.

use std::fmt;

use crate::limits::TENANT_LENGTH_MAX;

/// A checked tenant name: 1 to [`TENANT_LENGTH_MAX`] characters of lowercase ASCII letters,
/// digits, `_`, `-`, `.` and `:`, starting with a letter or digit.
///
/// Uppercase is refused rather than folded: an identity provider that writes one customer's
/// claim as `Acme` and `acme` would otherwise split it into two tenants, two intents and two
/// effects. Folding would join them, but silently: intents a ledger already keeps under
/// `Acme` would no longer be found by the same caller, whose repeat would then be a new
/// intent with another provider key. A refusal says so where the name arrives (config check,
/// the token's claim, the header), and the operator maps the name to lowercase knowingly.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tenant(String);

/// Why a text is not a tenant name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantError {
    #[error("the tenant name is empty")]
    Empty,
    #[error("the tenant name is {0} bytes long; the limit is {TENANT_LENGTH_MAX}")]
    TooLong(usize),
    #[error(
        "the tenant name {0:?} has a character other than ASCII letters, digits, `_`, `-`, `.` \
         and `:`, or does not start with a letter or digit"
    )]
    Characters(String),
    #[error(
        "the tenant name {0:?} has uppercase letters; tenant names are lowercase, so that one \
         customer is one tenant however its name is written: use {1:?} (for a token, map its \
         tenant claim to lowercase in the identity provider)"
    )]
    Uppercase(String, String),
}

impl Tenant {
    /// Checks a tenant name.
    pub fn parse(text: &str) -> Result<Tenant, TenantError> {
        if text.is_empty() {
            return Err(TenantError::Empty);
        }
        if text.len() > TENANT_LENGTH_MAX {
            return Err(TenantError::TooLong(text.len()));
        }
        let bytes = text.as_bytes();
        let allowed = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':');
        if !bytes[0].is_ascii_alphanumeric() || !bytes.iter().all(allowed) {
            // Quoted with its escapes, so a hostile name can't forge text in the message.
            return Err(TenantError::Characters(text.to_owned()));
        }
        if bytes.iter().any(u8::is_ascii_uppercase) {
            return Err(TenantError::Uppercase(
                text.to_owned(),
                text.to_ascii_lowercase(),
            ));
        }
        Ok(Tenant(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a credential allows. A call needs [`Scope::Call`]; reading intents needs
/// [`Scope::IntentsRead`] (its own tenant's) or [`Scope::Admin`] (any tenant's, and the
/// admin API); deciding on held intents needs [`Scope::Approve`], which `admin` does not
/// include: whoever runs the gateway is not thereby allowed to approve refunds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Call tools (HTTP API and MCP) and list them.
    Call,
    /// Read the intents of the credential's own tenant.
    IntentsRead,
    /// Everything but approving: any tenant's intents, and the admin API.
    Admin,
    /// Approve or deny intents held for approval (docs/design.md section 13), of the
    /// credential's own tenant, never one the same credential asked for.
    Approve,
}

impl Scope {
    /// Every scope, in the order they are documented.
    pub const ALL: [Scope; 4] = [
        Scope::Call,
        Scope::IntentsRead,
        Scope::Admin,
        Scope::Approve,
    ];

    /// The scope's name in configs and tokens.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Call => "call",
            Scope::IntentsRead => "intents:read",
            Scope::Admin => "admin",
            Scope::Approve => "approve",
        }
    }

    /// The scope named `text`, if any.
    pub fn parse(text: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == text)
    }

    fn bit(self) -> u8 {
        match self {
            Scope::Call => 1,
            Scope::IntentsRead => 2,
            Scope::Admin => 4,
            Scope::Approve => 8,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Scopes(u8);

impl Scopes {
    /// Every scope (the one tenant of `auth: none`, and `intentgate mcp` on stdio).
    pub fn all() -> Scopes {
        Scopes::from_iter(Scope::ALL)
    }

    pub fn contains(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The scopes in the set, in documented order.
    pub fn iter(self) -> impl Iterator<Item = Scope> {
        Scope::ALL
            .into_iter()
            .filter(move |scope| self.contains(*scope))
    }
}

impl FromIterator<Scope> for Scopes {
    fn from_iter<I: IntoIterator<Item = Scope>>(scopes: I) -> Scopes {
        Scopes(scopes.into_iter().fold(0, |bits, scope| bits | scope.bit()))
    }
}

impl fmt::Display for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Scope::as_str).collect();
        f.write_str(&names.join(" "))
    }
}

/// An authenticated caller: the tenant its calls belong to, what it may do, and who it is
/// (for logs and the event log: an API key's name, a token's subject, a proxy's user).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant: Tenant,
    pub scopes: Scopes,
    /// Who the credential names; never the credential itself.
    pub subject: String,
}

impl Principal {
    /// Whether the principal may do what `scope` allows. `admin` includes the others but
    /// `approve`, which is granted only by name.
    pub fn may(&self, scope: Scope) -> bool {
        self.scopes.contains(scope)
            || (scope != Scope::Approve && self.scopes.contains(Scope::Admin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_names_are_identifiers() {
        for good in ["default", "acme", "acme-eu", "org:42", "a.b_c", "7"] {
            assert_eq!(Tenant::parse(good).unwrap().as_str(), good);
        }
        assert_eq!(Tenant::parse(""), Err(TenantError::Empty));
        assert!(matches!(
            Tenant::parse(&"a".repeat(TENANT_LENGTH_MAX + 1)),
            Err(TenantError::TooLong(_))
        ));
        for bad in [
            "evil status=admin_override",
            "a\nb",
            "-acme",
            ".",
            "ünï",
            "a/b",
            " acme",
        ] {
            assert!(
                matches!(Tenant::parse(bad), Err(TenantError::Characters(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn tenant_names_that_differ_only_in_case_cannot_both_exist() {
        // An identity provider that wrote `Acme` and `acme` split one customer in two.
        for upper in ["Acme", "ACME", "acme-EU", "Default"] {
            let error = Tenant::parse(upper).unwrap_err();
            assert_eq!(
                error,
                TenantError::Uppercase(upper.to_owned(), upper.to_ascii_lowercase())
            );
            assert!(
                error
                    .to_string()
                    .contains(&format!("{:?}", upper.to_ascii_lowercase())),
                "{error}"
            );
        }
        assert_eq!(Tenant::parse("acme").unwrap().as_str(), "acme");
    }

    #[test]
    fn a_forged_tenant_is_quoted_in_the_error() {
        let message = Tenant::parse("x\nlevel=ERROR").unwrap_err().to_string();
        assert!(message.contains(r#""x\nlevel=ERROR""#), "{message}");
    }

    #[test]
    fn scopes_parse_print_and_admin_includes_the_others() {
        let scopes: Scopes = ["call", "intents:read"]
            .into_iter()
            .map(|name| Scope::parse(name).unwrap())
            .collect();
        assert_eq!(scopes.to_string(), "call intents:read");
        assert_eq!(Scope::parse("write"), None);
        let caller = Principal {
            tenant: Tenant::parse("acme").unwrap(),
            scopes: Scopes::from_iter([Scope::Call]),
            subject: "agent".into(),
        };
        assert!(caller.may(Scope::Call));
        assert!(!caller.may(Scope::IntentsRead));
        let admin = Principal {
            scopes: Scopes::from_iter([Scope::Admin]),
            ..caller
        };
        assert!(admin.may(Scope::IntentsRead) && admin.may(Scope::Call));
    }
}
