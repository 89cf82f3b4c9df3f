//! The gateway as an HTTP server: the HTTP API, MCP over Streamable HTTP at `/mcp`, the
//! admin API at `/v1/admin/` and the operator console at `/console`, with the background
//! tasks running beside them.
//!
//! [`Gateway::bind`] does everything that can fail before the first request (the open-file
//! limit, the listener, the authenticator, the reconciler), so that a caller that learns the
//! port from [`HttpGateway::local_addr`] knows the server will serve; [`HttpGateway::run`]
//! then serves until its shutdown future completes and the calls still running have ended
//! (bounded by the grace period).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use intentgate_admin::{Admin, AdminOptions, AlertLog, FailureLimit};
use intentgate_config::IdempotencyKeyHeader;
use intentgate_gate::Gate;
use intentgate_mcp::{HttpOptions, LOOPBACK_HOSTS, McpService};
use intentgate_ops::{Notifier, Reconciler};
use intentgate_server::ServerOptions;
use intentgate_server::auth::Authenticator;
use tokio::net::TcpListener;

use crate::tasks::{AdminReconciler, Background};
use crate::{Error, Gateway, admin_token, open_files};

/// Who an admin API change is attributed to when the request names no actor.
const ADMIN_ACTOR_DEFAULT: &str = "admin-api";

/// A gateway bound to its listener, its background tasks running: [`HttpGateway::run`]
/// serves it.
pub struct HttpGateway {
    listener: TcpListener,
    address: SocketAddr,
    gate: Arc<Gate>,
    options: ServerOptions,
    mcp: McpService,
    routes: axum::Router,
    /// Stopped when the server has stopped.
    background: Background,
}

impl Gateway {
    /// Raises the open-file limit and fits the connection limit under it, binds the
    /// listener, builds the authenticator and the routes, and starts the background tasks.
    pub async fn bind(self) -> Result<HttpGateway, Error> {
        let connection_limit = self.connection_limit()?;
        let (listener, address) = self.listen().await?;
        let authenticator = crate::auth::authenticator(&self.loaded.config, address)?;
        let mut options = self.server_options(authenticator, connection_limit);
        let mut background = self.start_background();
        // Owners hear about duplicate-call alerts, upstream errors that are the operator's,
        // lookup mismatches and reconciliation mismatches.
        // The notices are kept in the ledger's history, which every replica lists.
        let notifier = Arc::new(
            Notifier::new(self.loaded.config.owners.clone()).with_history(self.ledger.clone()),
        );
        self.start_notices(&mut background, &notifier);
        let reconciler = self.start_reconciler(&mut background, &notifier)?;
        self.log_start("");
        let (mcp, mcp_routes) = self.mcp_routes(address);
        let admin_routes = self.admin_routes(&mut options, reconciler, notifier);
        Ok(HttpGateway {
            listener,
            address,
            gate: self.gate,
            options,
            mcp,
            routes: mcp_routes.merge(admin_routes),
            background,
        })
    }

    /// The connection limit in force: the config's, fitted under the open-file limit once
    /// that is raised as far as the system allows.
    fn connection_limit(&self) -> Result<usize, Error> {
        let configured = self.loaded.config.gateway.connection_limit;
        let Some(limit) = open_files::raise_open_file_limit() else {
            return Ok(configured as usize);
        };
        let fitted =
            open_files::fit_connection_limit(configured, limit).map_err(Error::OpenFiles)?;
        if let Some(warning) = &fitted.warning {
            tracing::warn!(target: "intentgate::startup", "{warning}");
        }
        Ok(fitted.connections)
    }

    /// Binds the listener on `--listen`, or the config's `gateway.listen`.
    async fn listen(&self) -> Result<(TcpListener, SocketAddr), Error> {
        let listen = self
            .options
            .listen
            .clone()
            .unwrap_or_else(|| self.loaded.config.gateway.listen.to_string());
        let listener = TcpListener::bind(&listen)
            .await
            .map_err(|source| Error::Listen {
                address: listen.clone(),
                source,
            })?;
        let address = listener.local_addr().map_err(Error::LocalAddress)?;
        Ok((listener, address))
    }

    /// The HTTP server's limits, timeouts and checks from the config's `gateway` section.
    fn server_options(
        &self,
        authenticator: Authenticator,
        connection_limit: usize,
    ) -> ServerOptions {
        let gateway = &self.loaded.config.gateway;
        ServerOptions {
            body_limit_bytes: gateway.body_limit_bytes as usize,
            concurrency_limit: gateway.concurrency_limit as usize,
            shutdown_grace: Duration::from_millis(gateway.shutdown_grace_ms),
            authenticator: Arc::new(authenticator),
            allowed_origins: gateway.allowed_origins.clone(),
            header_read_timeout: Duration::from_millis(gateway.header_read_timeout_ms),
            body_read_timeout: Duration::from_millis(gateway.body_read_timeout_ms),
            idle_timeout: Duration::from_millis(gateway.idle_timeout_ms),
            connection_limit,
            // By default a quarter of the limit in force (after fitting it under the open-file
            // limit), at least one.
            connection_limit_per_address: gateway
                .connection_limit_per_address
                .map_or((connection_limit / 4).max(1), |limit| limit as usize),
            idempotency_key_required: self
                .loaded
                .config
                .tools
                .iter()
                .filter(|tool| tool.idempotency_key == IdempotencyKeyHeader::Required)
                .map(|tool| tool.name.clone())
                .collect(),
            // Set by `admin_routes`, once it is known whether the admin API is on.
            openapi_extra: None,
        }
    }

    /// Starts the tasks that tell the owners through `notifier`: duplicate-call alerts,
    /// upstream errors, lookup mismatches, key reuse and held intents.
    fn start_notices(&self, background: &mut Background, notifier: &Arc<Notifier>) {
        background.add(crate::start_alerts(&self.loaded, &self.gate, notifier));
        background.add(Some(crate::start_upstream_notices(
            &self.loaded,
            &self.gate,
            notifier,
        )));
        background.add(Some(crate::start_lookup_notices(
            &self.loaded,
            &self.gate,
            notifier,
        )));
        background.add(Some(crate::start_key_reuse_notices(
            &self.loaded,
            &self.gate,
            notifier,
        )));
        background.add(Some(crate::start_held_notices(
            &self.loaded,
            &self.gate,
            notifier,
        )));
    }

    /// The reconciler the admin API runs on demand, and on the config's schedule when it has
    /// one (`reconcile.every_seconds`).
    fn start_reconciler(
        &self,
        background: &mut Background,
        notifier: &Arc<Notifier>,
    ) -> Result<Arc<Reconciler>, Error> {
        let reconciler = Arc::new(
            Reconciler::new(
                &self.loaded,
                self.ledger.clone(),
                notifier.clone(),
                Some(self.gate.metrics().clone()),
                self.mcp.connections(),
            )
            .map_err(Error::Upstreams)?,
        );
        if self.loaded.config.reconcile.every_seconds > 0 {
            background.spawn(crate::reconcile_forever(
                reconciler.clone(),
                self.ledger.clone(),
                self.loaded.config.reconcile.clone(),
            ));
        }
        Ok(reconciler)
    }

    /// MCP over Streamable HTTP, through the same gate. A loopback server accepts only
    /// loopback Host names (DNS-rebinding protection); a routable one any name.
    fn mcp_routes(&self, address: SocketAddr) -> (McpService, axum::Router) {
        let mcp = crate::stdio::mcp_service(&self.loaded, self.gate.clone());
        let allowed_hosts = if address.ip().is_loopback() {
            LOOPBACK_HOSTS.map(String::from).to_vec()
        } else {
            Vec::new()
        };
        let routes = intentgate_mcp::http_router(
            mcp.clone(),
            HttpOptions {
                body_limit_bytes: self.loaded.config.gateway.body_limit_bytes as usize,
                allowed_hosts,
            },
        );
        (mcp, routes)
    }

    /// The admin API (flags, intents, reconciliation) under /v1/admin/, over the same
    /// ledger, and the console at /console. With credentials, a key or token with the
    /// `admin` scope reaches it. Documents the admin API in `options` when it is on, and says
    /// whether it is.
    fn admin_routes(
        &self,
        options: &mut ServerOptions,
        reconciler: Arc<Reconciler>,
        notifier: Arc<Notifier>,
    ) -> axum::Router {
        let token = admin_token(&self.options).map(str::to_owned);
        let credentials = console_credentials(token.as_deref(), &self.loaded.config.auth);
        let admin_scope = !options.authenticator.is_none();
        let admin_on = token.is_some() || admin_scope;
        let admin = Admin::new(
            self.ledger.clone(),
            AdminOptions {
                token,
                tools: self
                    .loaded
                    .tools
                    .iter()
                    .map(|tool| tool.name.clone())
                    .collect(),
                actor_default: ADMIN_ACTOR_DEFAULT.to_owned(),
                failure_limit: FailureLimit::default(),
                admin_scope,
                // Checked when the config loaded: every entry is an address or a network.
                trusted_proxies: self
                    .loaded
                    .config
                    .gateway
                    .trusted_proxies
                    .iter()
                    .filter_map(|proxy| intentgate_config::auth::parse_network(proxy))
                    .collect(),
            },
            Some(Arc::new(AdminReconciler(reconciler))),
            Some(Arc::new(NoticeLog(notifier))),
        )
        .with_gate(self.gate.clone());
        // The console at /console: its pages, and the admin API with its session cookie
        // accepted (with the CSRF checks of a browser's changes).
        let console = intentgate_console::Console::new(admin, self.ledger.clone(), &credentials);
        let routes = console.admin_router().merge(console.router());
        if admin_on {
            // `/openapi.json` documents the admin API only where it is served.
            options.openapi_extra = Some(intentgate_admin::openapi());
            tracing::info!(
                target: "intentgate::startup",
                "admin API on at /v1/admin/ and the console at /console (the admin token{} required)",
                if admin_scope { ", or a credential with the admin scope," } else { "" }
            );
        } else {
            tracing::info!(
                target: "intentgate::startup",
                "admin API off (set {} to turn it on)",
                intentgate_admin::TOKEN_ENV
            );
        }
        routes
    }
}

/// What the console's sessions are bound to: every admin credential this gateway accepts
/// (the admin token's SHA-256, and the `auth:` section with its keys' digests, tenants and
/// scopes). A gateway started with other credentials (a key revoked, the token rotated)
/// describes them differently, and ends the sessions made before.
fn console_credentials(token: Option<&str>, auth: &intentgate_config::AuthConfig) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let token: Option<[u8; 32]> = token.map(|token| Sha256::digest(token.as_bytes()).into());
    format!("admin token: {token:?}\nauth: {auth:?}").into_bytes()
}

/// The notices the notifier sent lately (the ledger's history), for the admin API's alerts.
struct NoticeLog(Arc<Notifier>);

#[async_trait::async_trait]
impl AlertLog for NoticeLog {
    async fn recent(
        &self,
        limit: u32,
    ) -> Result<Vec<serde_json::Value>, intentgate_ledger::LedgerError> {
        self.0.history(limit).await
    }
}

impl HttpGateway {
    /// The address the server listens on (the port chosen when the config asked for 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Serves until `shutdown` completes, then waits (bounded by the grace period) for the
    /// calls still running; stops the background tasks on the way out.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        let HttpGateway {
            listener,
            gate,
            options,
            mcp,
            routes,
            background,
            ..
        } = self;
        let served =
            intentgate_server::run_with(listener, gate.clone(), options, Some(routes), shutdown)
                .await;
        if served.is_ok() {
            let still_running = mcp.drain().await;
            if still_running > 0 {
                tracing::warn!(
                    still_running,
                    "shutdown grace period over; MCP calls still running stay in_flight in the ledger and are resolved by lookup"
                );
            }
        }
        drop(background);
        crate::tasks::stop(&gate).await;
        served.map_err(Error::Http)
    }
}
