//! Behaviours of the console's sessions and the notices' history, which every store keeps
//! for every replica on it.

use intentgate_ledger::{
    ALERT_DETAILS_BYTES_MAX, ALERTS_KEPT_MAX, CONSOLE_SESSIONS_MAX, ConsoleSession, Erase, Erasure,
    Ledger, LedgerError, StoredAlert,
};

use super::{OTHER_TENANT, OTHER_TOOL, T0, TENANT, TOOL};

const IDLE_MS: i64 = 60 * 60 * 1000;
const LIFETIME_MS: i64 = 12 * 60 * 60 * 1000;

/// A digest-shaped text for `n` (the stores never see a token).
fn digest(n: u32) -> String {
    format!("{n:064x}")
}

fn session(n: u32, now_ms: i64) -> ConsoleSession {
    ConsoleSession {
        token_digest: digest(n),
        actor: format!("console:ops-{n}"),
        csrf: format!("csrf-{n}"),
        approver_subject: None,
        approver_tenant: None,
        credentials: digest(999_999),
        created_ms: now_ms,
        last_used_ms: now_ms,
        idle_ms: IDLE_MS,
        expires_ms: now_ms + LIFETIME_MS,
    }
}

fn alert(n: u32, tenant: Option<&str>, tool: &str, key: Option<&str>, at_ms: i64) -> StoredAlert {
    StoredAlert {
        id: 0,
        at_ms,
        kind: "duplicate_calls".into(),
        tool: tool.into(),
        owner: "payments".into(),
        severity: "warning".into(),
        tenant: tenant.map(Into::into),
        intent_key: key.map(Into::into),
        summary: format!("alert {n}"),
        details: format!("{{\"n\":{n}}}"),
    }
}

pub(crate) async fn a_console_session_is_found_by_its_digest_and_ended_at_sign_out(
    ledger: &dyn Ledger,
) {
    let mut approver = session(1, T0);
    approver.approver_subject = Some("alice".into());
    approver.approver_tenant = Some(TENANT.into());
    ledger.create_console_session(&approver).await.unwrap();
    ledger
        .create_console_session(&session(2, T0))
        .await
        .unwrap();
    let found = ledger
        .console_session(&digest(1), T0 + 1_000)
        .await
        .unwrap()
        .expect("the session is live");
    assert_eq!(
        found,
        ConsoleSession {
            last_used_ms: T0 + 1_000,
            ..approver.clone()
        }
    );
    assert_eq!(ledger.console_session(&digest(3), T0).await.unwrap(), None);
    assert!(ledger.end_console_session(&digest(1)).await.unwrap());
    assert!(!ledger.end_console_session(&digest(1)).await.unwrap());
    assert_eq!(
        ledger
            .console_session(&digest(1), T0 + 2_000)
            .await
            .unwrap(),
        None
    );
    assert!(
        ledger
            .console_session(&digest(2), T0 + 2_000)
            .await
            .unwrap()
            .is_some(),
        "another session is untouched"
    );
}

pub(crate) async fn a_console_session_ends_when_idle_and_past_its_end_however_active(
    ledger: &dyn Ledger,
) {
    ledger
        .create_console_session(&session(1, T0))
        .await
        .unwrap();
    ledger
        .create_console_session(&session(2, T0))
        .await
        .unwrap();
    // Idle for exactly its idle time: ended, and deleted, so an earlier clock finds nothing.
    assert_eq!(
        ledger
            .console_session(&digest(1), T0 + IDLE_MS)
            .await
            .unwrap(),
        None
    );
    assert_eq!(ledger.console_session(&digest(1), T0).await.unwrap(), None);
    // Used every half idle time, it lives until its end, and not past it.
    let mut now_ms = T0;
    while now_ms + IDLE_MS / 2 < T0 + LIFETIME_MS {
        now_ms += IDLE_MS / 2;
        assert!(
            ledger
                .console_session(&digest(2), now_ms)
                .await
                .unwrap()
                .is_some(),
            "live at {now_ms}"
        );
    }
    assert_eq!(
        ledger
            .console_session(&digest(2), T0 + LIFETIME_MS)
            .await
            .unwrap(),
        None
    );
}

pub(crate) async fn a_full_session_table_ends_the_idlest_session(ledger: &dyn Ledger) {
    for n in 0..CONSOLE_SESSIONS_MAX {
        let created = T0 + i64::from(n);
        ledger
            .create_console_session(&session(n, created))
            .await
            .unwrap();
    }
    let later = T0 + 10_000;
    // Used again: now session 1 is the idlest.
    assert!(
        ledger
            .console_session(&digest(0), later)
            .await
            .unwrap()
            .is_some()
    );
    let newest = CONSOLE_SESSIONS_MAX;
    ledger
        .create_console_session(&session(newest, later))
        .await
        .unwrap();
    assert_eq!(
        ledger.console_session(&digest(1), later).await.unwrap(),
        None
    );
    for kept in [0, 2, newest] {
        assert!(
            ledger
                .console_session(&digest(kept), later)
                .await
                .unwrap()
                .is_some(),
            "session {kept}"
        );
    }
}

pub(crate) async fn sessions_and_alerts_the_schema_cannot_store_are_refused(ledger: &dyn Ledger) {
    let bad_sessions = [
        ConsoleSession {
            token_digest: "not-a-digest".into(),
            ..session(1, T0)
        },
        ConsoleSession {
            token_digest: digest(1).to_uppercase().replace('0', "A"),
            ..session(1, T0)
        },
        ConsoleSession {
            actor: String::new(),
            ..session(1, T0)
        },
        ConsoleSession {
            actor: "a".repeat(257),
            ..session(1, T0)
        },
        ConsoleSession {
            approver_subject: Some("alice".into()),
            ..session(1, T0)
        },
        ConsoleSession {
            expires_ms: T0,
            ..session(1, T0)
        },
        ConsoleSession {
            credentials: String::new(),
            ..session(1, T0)
        },
    ];
    for bad in bad_sessions {
        let refused = ledger.create_console_session(&bad).await;
        assert!(
            matches!(
                refused,
                Err(LedgerError::Invalid { .. } | LedgerError::TooLarge { .. })
            ),
            "{bad:?}: {refused:?}"
        );
    }
    assert!(matches!(
        ledger.console_session("short", T0).await,
        Err(LedgerError::Invalid { .. })
    ));
    assert_eq!(ledger.console_session(&digest(1), T0).await.unwrap(), None);
    let good = alert(1, Some(TENANT), TOOL, Some("k"), T0);
    let bad_alerts = [
        StoredAlert {
            severity: "loud".into(),
            ..good.clone()
        },
        StoredAlert {
            kind: String::new(),
            ..good.clone()
        },
        StoredAlert {
            details: "x".repeat(ALERT_DETAILS_BYTES_MAX + 1),
            ..good.clone()
        },
        StoredAlert {
            summary: "s".repeat(4_097),
            ..good.clone()
        },
        StoredAlert {
            tenant: Some("t".repeat(129)),
            ..good.clone()
        },
    ];
    for bad in bad_alerts {
        let refused = ledger.record_alert(&bad).await;
        assert!(
            matches!(
                refused,
                Err(LedgerError::Invalid { .. } | LedgerError::TooLarge { .. })
            ),
            "{}: {refused:?}",
            bad.summary.len()
        );
    }
    assert!(ledger.alerts(10).await.unwrap().is_empty());
}

pub(crate) async fn alerts_are_listed_newest_first_and_the_oldest_go_past_the_cap(
    ledger: &dyn Ledger,
) {
    let mut ids = Vec::new();
    for n in 0..ALERTS_KEPT_MAX + 3 {
        let stored = alert(n, Some(TENANT), TOOL, None, T0 + i64::from(n));
        ids.push(ledger.record_alert(&stored).await.unwrap());
    }
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "{ids:?}");
    let latest = ledger.alerts(2).await.unwrap();
    assert_eq!(latest.len(), 2);
    assert_eq!(latest[0].id, ids[ids.len() - 1]);
    assert_eq!(latest[0].summary, format!("alert {}", ALERTS_KEPT_MAX + 2));
    assert_eq!(
        latest[0].details,
        format!("{{\"n\":{}}}", ALERTS_KEPT_MAX + 2)
    );
    assert_eq!(latest[1].id, ids[ids.len() - 2]);
    let all = ledger.alerts(u32::MAX).await.unwrap();
    assert_eq!(all.len(), ALERTS_KEPT_MAX as usize);
    assert_eq!(all.last().unwrap().summary, "alert 3", "the 3 oldest went");
}

pub(crate) async fn purge_deletes_ended_sessions_and_old_alerts(ledger: &dyn Ledger) {
    let cutoff = T0 + 2 * IDLE_MS;
    // Idle since T0: ended at T0 + IDLE_MS, before the cutoff.
    ledger
        .create_console_session(&session(1, T0))
        .await
        .unwrap();
    // Used until the cutoff: live.
    ledger
        .create_console_session(&session(2, T0))
        .await
        .unwrap();
    for used_ms in [
        T0 + IDLE_MS / 2,
        T0 + IDLE_MS,
        T0 + IDLE_MS * 3 / 2,
        cutoff - 1,
    ] {
        assert!(
            ledger
                .console_session(&digest(2), used_ms)
                .await
                .unwrap()
                .is_some()
        );
    }
    ledger
        .record_alert(&alert(1, None, TOOL, None, cutoff - 1))
        .await
        .unwrap();
    let kept = ledger
        .record_alert(&alert(2, None, TOOL, None, cutoff))
        .await
        .unwrap();
    ledger.purge(cutoff).await.unwrap();
    let alerts = ledger.alerts(10).await.unwrap();
    assert_eq!(alerts.iter().map(|a| a.id).collect::<Vec<_>>(), [kept]);
    // The purged session can't come back even for a reader whose clock is behind.
    assert_eq!(ledger.console_session(&digest(1), T0).await.unwrap(), None);
    assert!(
        ledger
            .console_session(&digest(2), cutoff)
            .await
            .unwrap()
            .is_some()
    );
}

pub(crate) async fn erase_deletes_the_alerts_about_the_erased_tenant_tool_or_intent(
    ledger: &dyn Ledger,
) {
    let mut stored = Vec::new();
    for (n, tenant, tool, key) in [
        (0, Some(TENANT), TOOL, Some("k-1")),
        (1, Some(TENANT), TOOL, Some("k-2")),
        (2, Some(TENANT), OTHER_TOOL, Some("k-1")),
        (3, Some(OTHER_TENANT), TOOL, Some("k-1")),
        (4, None, TOOL, None),
    ] {
        stored.push(
            ledger
                .record_alert(&alert(n, tenant, tool, key, T0))
                .await
                .unwrap(),
        );
    }
    let erase = |tool: Option<&str>, key: Option<&str>| Erase {
        tenant: TENANT.into(),
        tool: tool.map(Into::into),
        key: key.map(Into::into),
        force: false,
        actor: "dpo@example.com".into(),
        reason: "erasure request 78".into(),
        now_ms: T0 + 1,
    };
    let ids = async || {
        let mut ids: Vec<i64> = ledger
            .alerts(10)
            .await
            .unwrap()
            .iter()
            .map(|a| a.id)
            .collect();
        ids.sort();
        ids
    };
    assert!(matches!(
        ledger.erase(&erase(Some(TOOL), Some("k-1"))).await.unwrap(),
        Erasure::Erased(_)
    ));
    assert_eq!(ids().await, [stored[1], stored[2], stored[3], stored[4]]);
    ledger.erase(&erase(Some(TOOL), None)).await.unwrap();
    assert_eq!(ids().await, [stored[2], stored[3], stored[4]]);
    ledger.erase(&erase(None, None)).await.unwrap();
    assert_eq!(
        ids().await,
        [stored[3], stored[4]],
        "other tenants and per-tool alerts stay"
    );
}
