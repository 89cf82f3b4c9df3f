//! A PostgreSQL primary and a streaming standby of its own, on loopback ports, for a
//! failover: made with `initdb` and `pg_basebackup` in a temporary folder, run as the
//! `postgres` OS user when the test runs as root (the server refuses root). The standby
//! streams from the primary through a [`Proxy`], so a test can hold replication back (a
//! lagging standby) before it fails over. Both servers are stopped (immediately) when the
//! pair is dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use super::proxy::Proxy;

/// Where the PostgreSQL server programs are looked for, newest version first, unless
/// `INTENTGATE_PG_BIN` names the folder.
const BINARY_FOLDERS: &str = "/usr/lib/postgresql";
/// Longest wait for a server to start, stop or be promoted (`pg_ctl --timeout`).
const PG_CTL_TIMEOUT_SECONDS: &str = "30";

/// Whether replication waits for the standby before a commit returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// `synchronous_standby_names = '*'`: a commit made with `synchronous_commit = on`
    /// returns once the standby has flushed it.
    Synchronous,
    /// The default: a commit returns at once; the standby follows a little behind.
    Asynchronous,
}

/// The folder of the PostgreSQL server programs, or why there is none.
pub fn binaries() -> Result<PathBuf, String> {
    if let Some(folder) = std::env::var_os("INTENTGATE_PG_BIN") {
        let folder = PathBuf::from(folder);
        return if folder.join("initdb").exists() {
            Ok(folder)
        } else {
            Err(format!(
                "INTENTGATE_PG_BIN={} has no initdb",
                folder.display()
            ))
        };
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(BINARY_FOLDERS)
        .map_err(|error| format!("{BINARY_FOLDERS}: {error}"))?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| format!("no {BINARY_FOLDERS}/VERSION/bin/initdb"))
}

/// A free loopback port (free when asked; a server is started on it right after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One server of the pair.
pub struct Server {
    pub data: PathBuf,
    pub port: u16,
    running: bool,
}

impl Server {
    pub fn address(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

/// The primary, the standby, and the proxy replication goes through.
pub struct Pair {
    bin: PathBuf,
    pub primary: Server,
    pub standby: Server,
    pub replication: Proxy,
    pub mode: Replication,
    folder: tempfile::TempDir,
}

impl Pair {
    /// Makes and starts the primary, copies it to the standby, starts the standby streaming
    /// from it and waits until it does (as a synchronous standby, in that mode).
    pub async fn start(bin: PathBuf, mode: Replication) -> Pair {
        let folder = tempfile::tempdir().unwrap();
        let owner = as_server_user();
        if owner.is_some() {
            run(Command::new("chown").args(["postgres", folder.path().to_str().unwrap()]));
        }
        let primary = Server {
            data: folder.path().join("primary"),
            port: free_port(),
            running: false,
        };
        let standby = Server {
            data: folder.path().join("standby"),
            port: free_port(),
            running: false,
        };
        let replication = Proxy::start(primary.address()).await;
        let mut pair = Pair {
            bin,
            primary,
            standby,
            replication,
            mode,
            folder,
        };
        pair.server_command(
            "initdb",
            &[
                "--pgdata",
                pair.primary.data.to_str().unwrap(),
                "--username",
                "postgres",
                "--auth",
                "trust",
                "--no-sync",
                "--no-instructions",
            ],
        );
        let synchronous = match mode {
            Replication::Synchronous => "synchronous_standby_names = '*'\n",
            Replication::Asynchronous => "",
        };
        // fsync off: the failover stops server processes, not the machine, and the page
        // cache keeps what they wrote; it spares a shared machine the flushes.
        let settings = format!(
            "listen_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             wal_level = replica\nmax_wal_senders = 4\nfsync = off\n\
             wal_sender_timeout = 60s\nmax_connections = 100\n{synchronous}",
            pair.folder.path().display()
        );
        append(&pair.primary.data.join("postgresql.conf"), &settings);
        pair.start_server(Side::Primary);
        let primary_port = pair.primary.port.to_string();
        pair.server_command(
            "pg_basebackup",
            &[
                "--pgdata",
                pair.standby.data.to_str().unwrap(),
                "--host",
                "127.0.0.1",
                "--port",
                &primary_port,
                "--username",
                "postgres",
                "--checkpoint",
                "fast",
                "--wal-method",
                "stream",
                "--no-sync",
            ],
        );
        append(
            &pair.standby.data.join("postgresql.conf"),
            &format!(
                "primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name=standby'\n\
                 synchronous_standby_names = ''\n",
                pair.replication.address.port()
            ),
        );
        std::fs::write(pair.standby.data.join("standby.signal"), "").unwrap();
        if owner.is_some() {
            run(Command::new("chown").args([
                "postgres",
                pair.standby.data.join("standby.signal").to_str().unwrap(),
            ]));
        }
        pair.start_server(Side::Standby);
        pair.wait_for_streaming().await;
        pair
    }

    /// `postgres://postgres@PRIMARY,STANDBY/postgres?target_session_attrs=read-write`: the
    /// URL a gateway should be given for a pair that fails over. A connection is made to the
    /// first host that accepts writes, so after a failover a new connection reaches the
    /// promoted standby.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            self.primary.port, self.standby.port
        )
    }

    /// The URL of one server alone.
    pub fn server_url(server: &Server) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", server.port)
    }

    /// Waits (up to 30 s) until the standby streams from the primary, in the pair's mode.
    async fn wait_for_streaming(&self) {
        let client = super::support::connect(&Pair::server_url(&self.primary)).await;
        let wanted = match self.mode {
            Replication::Synchronous => "sync",
            Replication::Asynchronous => "async",
        };
        super::support::until(
            Duration::from_secs(30),
            Duration::from_millis(50),
            async || {
                let rows = client
                    .query("SELECT state, sync_state FROM pg_stat_replication", &[])
                    .await
                    .map_err(|error| error.to_string())?;
                let states: Vec<(String, String)> =
                    rows.iter().map(|row| (row.get(0), row.get(1))).collect();
                if states
                    .iter()
                    .any(|(state, sync)| state == "streaming" && sync == wanted)
                {
                    Ok(())
                } else {
                    Err(format!(
                        "the standby is not streaming ({wanted}) after 30 s: {states:?}"
                    ))
                }
            },
        )
        .await;
    }

    /// Stops the primary the hard way (`pg_ctl stop -m immediate`: its processes quit at
    /// once, nothing is flushed or handed over) and promotes the standby; waits until it
    /// accepts writes.
    pub fn fail_over(&mut self) {
        self.stop(Side::Primary);
        let data = self.standby.data.to_str().unwrap().to_owned();
        self.server_command(
            "pg_ctl",
            &[
                "promote",
                "--pgdata",
                &data,
                "--wait",
                "--timeout",
                PG_CTL_TIMEOUT_SECONDS,
            ],
        );
    }

    fn server(&mut self, side: Side) -> &mut Server {
        match side {
            Side::Primary => &mut self.primary,
            Side::Standby => &mut self.standby,
        }
    }

    fn start_server(&mut self, side: Side) {
        let server = self.server(side);
        let (data, port) = (server.data.to_str().unwrap().to_owned(), server.port);
        let log = format!("{data}.log");
        self.server_command(
            "pg_ctl",
            &[
                "start",
                "--pgdata",
                &data,
                "--log",
                &log,
                "--wait",
                "--timeout",
                PG_CTL_TIMEOUT_SECONDS,
                "--options",
                &format!("-p {port}"),
            ],
        );
        self.server(side).running = true;
    }

    /// `pg_ctl stop -m immediate`, if it runs.
    fn stop(&mut self, side: Side) {
        if !self.server(side).running {
            return;
        }
        let data = self.server(side).data.to_str().unwrap().to_owned();
        self.server_command(
            "pg_ctl",
            &[
                "stop",
                "--pgdata",
                &data,
                "--mode",
                "immediate",
                "--wait",
                "--timeout",
                PG_CTL_TIMEOUT_SECONDS,
            ],
        );
        self.server(side).running = false;
    }

    /// Runs one of the server programs (as the `postgres` user when this runs as root);
    /// panics with its output when it fails.
    fn server_command(&self, program: &str, args: &[&str]) -> Output {
        let path = self.bin.join(program);
        let mut command = match as_server_user() {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(&path);
                command
            }
            None => Command::new(&path),
        };
        command.args(args).current_dir(self.folder.path());
        run(&mut command)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for side in [Side::Primary, Side::Standby] {
            if self.server(side).running {
                let data = self.server(side).data.to_str().unwrap().to_owned();
                let path = self.bin.join("pg_ctl");
                let mut command = match as_server_user() {
                    Some(user) => {
                        let mut command = Command::new("runuser");
                        command.args(["-u", user, "--"]).arg(&path);
                        command
                    }
                    None => Command::new(&path),
                };
                let _ = command
                    .args(["stop", "--pgdata", &data, "--mode", "immediate"])
                    .output();
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Side {
    Primary,
    Standby,
}

/// `Some("postgres")` when this process runs as root: the server programs then run as that
/// user, since PostgreSQL refuses to run as root.
fn as_server_user() -> Option<&'static str> {
    let output = Command::new("id").arg("-u").output().ok()?;
    (String::from_utf8_lossy(&output.stdout).trim() == "0").then_some("postgres")
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

/// Runs `command`; panics with what it printed when it fails.
fn run(command: &mut Command) -> Output {
    let output = command.output().expect("the command starts");
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}
