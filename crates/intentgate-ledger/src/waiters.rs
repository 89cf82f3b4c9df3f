//! Wake-ups for callers waiting on an intent whose lease another caller holds.
//!
//! A store calls [`Waiters::notify`] after it commits a change to an intent; a waiting
//! caller sleeps in [`Waiters::wait`] until then or until its timeout. Wake-ups can be
//! missed (a change committed between a caller's read and its wait), so waits are short and
//! callers always read the intent again: a missed wake-up costs one poll interval, never a
//! wrong answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::IntentId;

/// Longest wait for a change before a waiting caller reads again, in every store. Bounds the
/// cost of a missed wake-up.
pub const WAIT_POLL: Duration = Duration::from_millis(25);

#[derive(Default)]
pub struct Waiters {
    waiting: Mutex<HashMap<IntentId, Arc<Notify>>>,
}

impl Waiters {
    pub async fn wait(&self, id: IntentId, timeout: Duration) {
        let notify = self
            .waiting
            .lock()
            .expect("waiters lock")
            .entry(id)
            .or_default()
            .clone();
        let _ = tokio::time::timeout(timeout, notify.notified()).await;
    }

    pub fn notify(&self, id: IntentId) {
        if let Some(notify) = self.waiting.lock().expect("waiters lock").remove(&id) {
            notify.notify_waiters();
        }
    }

    /// Wakes every waiting caller (after a wake-up source may have missed changes). Only a
    /// store woken from outside (PostgreSQL's listener) can miss changes that way.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub fn notify_all(&self) {
        let waiting = std::mem::take(&mut *self.waiting.lock().expect("waiters lock"));
        for notify in waiting.into_values() {
            notify.notify_waiters();
        }
    }
}
