//! Holds an exclusive lock on a SQLite database for a while, the way a writer that never
//! commits would: `hold-store-lock <db> <seconds>`.
//!
//! Prints `locked` on stdout once the lock is held (so a test can wait for it), then sleeps and
//! exits, rolling back. Used by the server's fault tests on a copy of the fixture store; it is
//! never pointed at a real opencode store.

use rusqlite::Connection;
use std::io::Write;
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(db), Some(secs)) = (
        args.first(),
        args.get(1).and_then(|s| s.parse::<f64>().ok()),
    ) else {
        eprintln!("usage: hold-store-lock <db> <seconds>");
        std::process::exit(2);
    };
    let conn = match Connection::open(db) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hold-store-lock: cannot open {db}: {e}");
            std::process::exit(1);
        }
    };
    // Exclusive locking mode keeps the lock even in WAL mode, where readers would otherwise
    // go on reading the last committed state.
    let locked = conn
        .query_row("PRAGMA locking_mode = EXCLUSIVE", [], |_| Ok(()))
        .and_then(|_| conn.execute_batch("BEGIN EXCLUSIVE; CREATE TABLE IF NOT EXISTS zz_lock_probe (x INTEGER); INSERT INTO zz_lock_probe VALUES (1);"));
    if let Err(e) = locked {
        eprintln!("hold-store-lock: cannot lock {db}: {e}");
        std::process::exit(1);
    }
    println!("locked");
    let _ = std::io::stdout().flush();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let _ = conn.execute_batch("ROLLBACK");
}
