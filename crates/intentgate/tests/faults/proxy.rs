//! A TCP proxy on a loopback port that can play a network partition: while it is
//! partitioned it stops reading and forwarding in both directions but keeps every socket
//! open, so what either side sends goes unanswered (packets dropped, not refused), and a new
//! connection is accepted but never reaches the other side. Healed, it forwards again what
//! was held, as TCP delivers retransmitted segments once a partition ends.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Bytes read at once from one side.
const BUFFER_BYTES: usize = 16 * 1024;

/// The proxy; it stops (closing every connection) when dropped.
pub struct Proxy {
    /// Where clients connect.
    pub address: SocketAddr,
    partitioned: watch::Sender<bool>,
    tasks: Arc<Mutex<JoinSet<()>>>,
}

impl Proxy {
    /// A proxy to `target`, forwarding.
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (partitioned, _) = watch::channel(false);
        let tasks: Arc<Mutex<JoinSet<()>>> = Arc::default();
        let accepting = {
            let partitioned = partitioned.clone();
            let tasks = tasks.clone();
            async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    let partitioned = partitioned.subscribe();
                    tasks
                        .lock()
                        .unwrap()
                        .spawn(connection(client, target, partitioned));
                }
            }
        };
        tasks.lock().unwrap().spawn(accepting);
        Proxy {
            address,
            partitioned,
            tasks,
        }
    }

    /// `host:port` of the proxy, for a URL.
    pub fn host_port(&self) -> String {
        self.address.to_string()
    }

    /// Stops forwarding: nothing either side sends arrives, nothing is refused.
    pub fn partition(&self) {
        self.partitioned.send_replace(true);
    }

    /// Forwards again, what was held first.
    pub fn heal(&self) {
        self.partitioned.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.tasks.lock().unwrap().abort_all();
    }
}

/// One client's connection: once the network lets it through, connects to the target and
/// forwards both ways until either side closes.
async fn connection(client: TcpStream, target: SocketAddr, mut partitioned: watch::Receiver<bool>) {
    if partitioned.wait_for(|held| !held).await.is_err() {
        return;
    }
    let Ok(server) = TcpStream::connect(target).await else {
        // The target is down: the client sees its connection closed.
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        forward(client_read, server_write, partitioned.clone()),
        forward(server_read, client_write, partitioned),
    );
}

/// Copies `from` to `to`, reading nothing while partitioned, until `from` ends; then ends
/// `to`'s writing side.
async fn forward(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut partitioned: watch::Receiver<bool>,
) {
    let mut buffer = vec![0u8; BUFFER_BYTES];
    loop {
        if partitioned.wait_for(|held| !held).await.is_err() {
            return;
        }
        tokio::select! {
            read = from.read(&mut buffer) => {
                let Ok(count) = read else { break };
                if count == 0 {
                    break;
                }
                // Bytes read just before a partition began were already on their way.
                if to.write_all(&buffer[..count]).await.is_err() {
                    break;
                }
            }
            // Partitioned (or healed) while waiting: look again before reading.
            changed = partitioned.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
    let _ = to.shutdown().await;
}
