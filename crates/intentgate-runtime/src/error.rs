//! What can stop a gateway from starting or keep it from serving, one variant per step.
//!
//! Each variant's message names the step (the ledger, the upstreams, the listener) and keeps
//! the cause as its source, so that a caller printing the whole chain (`{error:#}` through
//! anyhow) shows one line with every cause, as the command line does.

use std::net::SocketAddr;

use intentgate_config::ConfigErrors;
use intentgate_core::TenantError;
use intentgate_core::sensitive::HashKeyError;
use intentgate_server::auth::AuthSetupError;

/// Why a gateway could not start or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The config file was refused: every error with its line and fix.
    #[error("{0}")]
    Config(ConfigErrors),
    /// The operating system gave no random bytes for a throwaway hash key.
    #[error("the system gave no random bytes for a hash key: {0}")]
    Random(getrandom::Error),
    /// A hash key the gateway can't use.
    #[error(transparent)]
    HashKey(#[from] HashKeyError),
    /// The admin token is too short or otherwise unusable.
    #[error("the admin token")]
    AdminToken(#[source] intentgate_admin::TokenError),
    /// The open-file limit leaves no room for a single connection; the message says how to
    /// raise it.
    #[error("{0}")]
    OpenFiles(String),
    /// The ledger (a SQLite file or a PostgreSQL URL) could not be opened.
    #[error("opening the intent ledger")]
    Ledger(#[source] intentgate_ledger::LedgerError),
    /// This gateway process could not register in the ledger, which its leases need.
    #[error("registering this gateway process in the intent ledger")]
    Register(#[source] intentgate_ledger::LedgerError),
    /// An upstream of the config (its base URL, a header, a template) can't be built.
    #[error("the upstreams of the config")]
    Upstreams(#[source] intentgate_http::HttpError),
    /// An MCP upstream could not be started (its first session did not open).
    #[error("starting the MCP upstreams: {0}")]
    McpStart(String),
    /// The config's MCP tools don't fit what their servers list (an unclassified imported
    /// tool, a call of a tool the server does not list): every problem with its fix.
    #[error(transparent)]
    McpTools(intentgate_config::imports::ImportErrors),
    /// The config's tools can't make a gate.
    #[error("the tools of the config")]
    Tools(#[source] intentgate_gate::GateError),
    /// The listen address can't be bound.
    #[error("can't listen on {address}: is another process using it?")]
    Listen {
        address: String,
        #[source]
        source: std::io::Error,
    },
    /// The bound listener has no local address.
    #[error(transparent)]
    LocalAddress(std::io::Error),
    /// The `auth:` section can't make an authenticator for this listener.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// The HTTP server failed while serving.
    #[error("the HTTP server stopped")]
    Http(#[source] std::io::Error),
    /// MCP over stdio failed while serving.
    #[error("serving MCP on stdio")]
    Stdio(#[source] intentgate_mcp::StdioError),
}

/// Why the `auth:` section could not become the server's authenticator. Past the first
/// variant, these are things the config check refuses, met only by a config that skipped it.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// `auth: none` on an address other hosts can reach.
    #[error(
        "`auth: none` serves every caller as one tenant, so it is allowed only on a loopback \
         address, and this gateway listens on {address}. Listen on 127.0.0.1, or configure \
         `auth:` with api_keys, jwt or trusted_proxy (`intentgate auth new-key` makes a key)"
    )]
    NoneOffLoopback { address: SocketAddr },
    /// `gateway.tenant` is not a tenant name.
    #[error("gateway.tenant")]
    GatewayTenant(#[source] TenantError),
    /// An API key's tenant, or one it may act for, is not a tenant name.
    #[error(transparent)]
    KeyTenant(#[from] TenantError),
    /// An API key's `sha256` is not 64 hex digits.
    #[error("an API key digest the config check passed")]
    KeyDigest,
    /// `auth.jwt` names neither a JWKS URL nor a file.
    #[error("auth.jwt has no JWKS")]
    NoJwks,
    /// `auth.jwt.algorithms` names an algorithm the JWT library does not know.
    #[error("a checked algorithm name")]
    Algorithm(#[source] jsonwebtoken::errors::Error),
    /// The server refused the settings.
    #[error("the auth section of the config")]
    Setup(#[source] AuthSetupError),
}
