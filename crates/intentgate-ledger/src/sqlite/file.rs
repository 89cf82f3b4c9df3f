//! Who may read the ledger's files.
//!
//! The ledger holds the arguments and results of every call (names, addresses, email bodies,
//! amounts), so its files are the owner's alone. SQLite would create the database file with
//! mode 0644 less the umask, readable by every user of the machine, and gives its WAL and
//! shared-memory files the database file's mode. So a new ledger file is created here first,
//! with mode 0600, and SQLite opens the empty file (an empty file is an empty database); its
//! WAL and shared memory follow with 0600. An existing ledger's files are never changed
//! behind the operator's back: if group or others may read them, opening it logs a warning
//! with the `chmod` that closes them.

use std::path::{Path, PathBuf};

/// Mode bits of group and others: any of them set means someone else may read or write.
#[cfg(unix)]
const OTHERS_MODE_BITS: u32 = 0o077;
/// A new ledger file's mode: read and write for its owner only.
#[cfg(unix)]
const LEDGER_FILE_MODE: u32 = 0o600;
/// The files SQLite keeps beside the database in WAL mode.
#[cfg(unix)]
const COMPANION_SUFFIXES: [&str; 2] = ["-wal", "-shm"];

/// The database file and its WAL and shared-memory files.
#[cfg(unix)]
fn ledger_files(path: &Path) -> Vec<PathBuf> {
    let mut files = vec![path.to_path_buf()];
    for suffix in COMPANION_SUFFIXES {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        files.push(PathBuf::from(name));
    }
    files
}

/// Creates the ledger file with mode 0600 if it does not exist yet, so that SQLite never
/// creates it (or its WAL and shared memory) readable by others. A file that exists is left
/// as it is.
pub(crate) fn create_private(path: &Path) -> std::io::Result<()> {
    // SQLite's name for a database in memory: no file to create.
    if path.as_os_str() == ":memory:" {
        return Ok(());
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(LEDGER_FILE_MODE);
    }
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(error),
    }
}

/// A warning naming the ledger files that group or others may read or write, with the fix;
/// `None` when every existing one is private (or the system has no such modes).
pub(crate) fn loose_permissions(path: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let loose: Vec<(PathBuf, u32)> = ledger_files(path)
            .into_iter()
            .filter_map(|file| {
                let mode = std::fs::metadata(&file).ok()?.permissions().mode() & 0o777;
                (mode & OTHERS_MODE_BITS != 0).then_some((file, mode))
            })
            .collect();
        if loose.is_empty() {
            return None;
        }
        let described: Vec<String> = loose
            .iter()
            .map(|(file, mode)| format!("{} (mode {mode:o})", file.display()))
            .collect();
        let names: Vec<String> = loose
            .iter()
            .map(|(file, _)| file.display().to_string())
            .collect();
        Some(format!(
            "the ledger holds the arguments and results of every call, and other users of this \
machine may read {}; make it private with `chmod 600 {}`",
            described.join(", "),
            names.join(" ")
        ))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn set_mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_new_file_is_the_owners_alone_and_an_existing_one_is_left_as_it_is() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        create_private(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        set_mode(&path, 0o640);
        create_private(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640, "an existing file is not changed");
    }

    #[test]
    fn files_others_may_read_are_named_with_the_chmod_that_closes_them() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let wal = folder.path().join("ledger.db-wal");
        std::fs::write(&path, b"").unwrap();
        std::fs::write(&wal, b"").unwrap();
        set_mode(&path, 0o600);
        set_mode(&wal, 0o600);
        assert_eq!(loose_permissions(&path), None);
        set_mode(&path, 0o644);
        set_mode(&wal, 0o604);
        let warning = loose_permissions(&path).unwrap();
        let (file, wal) = (path.display(), wal.display());
        assert!(warning.contains(&format!("{file} (mode 644)")), "{warning}");
        assert!(warning.contains(&format!("{wal} (mode 604)")), "{warning}");
        assert!(
            warning.ends_with(&format!("`chmod 600 {file} {wal}`")),
            "{warning}"
        );
    }
}
