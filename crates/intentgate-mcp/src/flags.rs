//! The kill switch as MCP clients see it: which of the gate's tools are switched off,
//! watched in the ledger, and `notifications/tools/list_changed` when that set changes.
//!
//! The flags live in the ledger (`intentgate flags disable`, or any replica's admin
//! interface), so nothing tells this process that one changed: [`FlagWatch`] reads the
//! gate's own view of them (`Gate::switched_off`, the cache its calls are refused by) every
//! [`FLAG_POLL`]. A change is published (to `tools/list`, and to every registered peer, the
//! stdio client, as `notifications/tools/list_changed`) when the gate has it, so a client
//! told that a tool is off never gets a call through it, and one told it is back never gets
//! `disabled`. Everything happens within about a second of the switch. The stateless Streamable HTTP endpoint has no standing connection to notify: its
//! clients see the change at their next `tools/list`.
//!
//! The watcher is a task owned by the service: it ends when the last clone of the
//! [`McpService`](crate::McpService) is dropped, and a ledger error while polling is
//! logged and retried, never fatal.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use intentgate_gate::Gate;
use rmcp::RoleServer;
use rmcp::service::Peer;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often the gate's view of the flags is read. The same period as the gate's flag cache
/// (`intentgate_gate::FLAG_REFRESH`), so a client is told about a switch at about the time
/// the gate starts honouring it; at most one indexed read of a small table each time.
pub const FLAG_POLL: Duration = Duration::from_millis(500);
/// Longest a `tools/list` waits for the first read of the flags (at startup). Past it the
/// ledger is failing: the tools are listed unmarked (the gate still refuses calls to a
/// switched-off tool, and fails closed while it can't read the flags).
const FIRST_READ_WAIT: Duration = Duration::from_secs(5);
/// Longest wait for one peer to take a notification, so that a client that stopped reading
/// can't hold up the others or the watcher.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// The gate's tools that are switched off, by name.
pub(crate) type SwitchedOff = Arc<BTreeSet<String>>;

/// The peers told when the tool list changes, by registration number.
#[derive(Default)]
struct Peers {
    next: AtomicU64,
    peers: Mutex<BTreeMap<u64, Peer<RoleServer>>>,
}

/// The flag watcher of one service: the last set read, the peers to tell, and the task.
pub(crate) struct FlagWatch {
    /// `None` until the first read of the flags succeeds.
    switched_off: watch::Receiver<Option<SwitchedOff>>,
    peers: Arc<Peers>,
    task: JoinHandle<()>,
}

impl FlagWatch {
    /// Starts watching the flags of `gate`'s tools. Must run inside a Tokio runtime.
    pub(crate) fn start(gate: Arc<Gate>) -> FlagWatch {
        let (sender, switched_off) = watch::channel(None);
        let peers = Arc::new(Peers::default());
        let task = tokio::spawn(poll_forever(gate, sender, peers.clone()));
        FlagWatch {
            switched_off,
            peers,
            task,
        }
    }

    /// The switched-off tools as last read. Waits (bounded) for the first read; an empty
    /// set if it has not come by then.
    pub(crate) async fn switched_off(&self) -> SwitchedOff {
        let mut receiver = self.switched_off.clone();
        let first = tokio::time::timeout(FIRST_READ_WAIT, receiver.wait_for(Option::is_some));
        match first.await {
            Ok(Ok(read)) => read.clone().expect("waited for Some"),
            // The watcher stopped (the service is being dropped) or the ledger is failing.
            Ok(Err(_)) | Err(_) => {
                tracing::warn!(
                    "the kill-switch flags could not be read; tools/list shows every tool as on (calls are still refused while the flags can't be read)"
                );
                SwitchedOff::default()
            }
        }
    }

    /// Tells `peer` of every later change of the switched-off tools, until the returned
    /// registration is dropped.
    pub(crate) fn register(&self, peer: Peer<RoleServer>) -> PeerRegistration {
        let id = self.peers.next.fetch_add(1, Ordering::Relaxed);
        self.peers
            .peers
            .lock()
            .expect("peers lock")
            .insert(id, peer);
        PeerRegistration {
            peers: Arc::downgrade(&self.peers),
            id,
        }
    }
}

impl Drop for FlagWatch {
    fn drop(&mut self) {
        // The task holds the gate but not the service: without this it would poll on
        // after the service is gone.
        self.task.abort();
    }
}

/// A peer told of tool list changes; dropping it stops that.
#[must_use = "the peer is told of changes only while the registration is kept"]
pub struct PeerRegistration {
    peers: Weak<Peers>,
    id: u64,
}

impl Drop for PeerRegistration {
    fn drop(&mut self) {
        if let Some(peers) = self.peers.upgrade() {
            peers.peers.lock().expect("peers lock").remove(&self.id);
        }
    }
}

/// Reads the flags every [`FLAG_POLL`] and, when the set of switched-off tools changes,
/// publishes it and tells every peer.
async fn poll_forever(
    gate: Arc<Gate>,
    sender: watch::Sender<Option<SwitchedOff>>,
    peers: Arc<Peers>,
) {
    let mut ticks = tokio::time::interval(FLAG_POLL);
    // A slow read delays the next one rather than bunching them.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        ticks.tick().await;
        let now = match gate.switched_off().await {
            Ok(now) => now,
            Err(error) => {
                // Once per outage, not every half second.
                if !failing {
                    tracing::warn!(%error, "reading the kill-switch flags failed; trying again every 500 ms");
                    failing = true;
                }
                continue;
            }
        };
        if failing {
            tracing::info!("reading the kill-switch flags works again");
            failing = false;
        }
        let before = sender.borrow().clone();
        match before {
            Some(before) if *before == now => {}
            // The first read: nothing was published before it, so no one to tell.
            None => {
                sender.send_replace(Some(Arc::new(now)));
            }
            Some(before) => {
                tracing::info!(
                    switched_off = ?now,
                    before = ?*before,
                    "the switched-off tools changed; telling MCP clients the tool list changed"
                );
                sender.send_replace(Some(Arc::new(now)));
                notify(&peers).await;
            }
        }
    }
}

/// Sends `notifications/tools/list_changed` to every registered peer, forgetting the ones
/// whose connection has closed.
async fn notify(peers: &Peers) {
    let registered: Vec<(u64, Peer<RoleServer>)> = peers
        .peers
        .lock()
        .expect("peers lock")
        .iter()
        .map(|(id, peer)| (*id, peer.clone()))
        .collect();
    for (id, peer) in registered {
        if peer.is_transport_closed() {
            peers.peers.lock().expect("peers lock").remove(&id);
            continue;
        }
        match tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_tool_list_changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, "could not tell an MCP client that the tool list changed")
            }
            Err(_) => tracing::warn!(
                "an MCP client did not take the tool-list-changed notification within 5 s; skipped"
            ),
        }
    }
}
