//! The runtime side of the health gate: asks every check (at once, each within
//! `--health-timeout`) when a start is proposed and the last verdict is older than
//! `--health-interval`, counts each answer in the metrics, and when the verdict changes logs it
//! and writes it into the rotation's record for `status`. How each answer is judged is in
//! [`crate::fleet::health`].

use std::time::Instant;

use jiff::Timestamp;
use rotor_core::http::{HttpClient, HttpError};
use tokio_util::task::TaskTracker;

use crate::fleet::health::{HealthConfig, verdict};
use crate::metrics::Metrics;
use crate::record::rotation::{HealthGateState, RecordRef};
use crate::record::rotation_io::write_health;

pub(super) struct HealthGate {
    cfg: HealthConfig,
    http: HttpClient,
    /// The last verdict, and when it was reached.
    last: Option<(Instant, Result<(), String>)>,
    /// What was last reported (log, gauge, record): reported again only when it changes.
    reported: Option<HealthGateState>,
    /// Where the verdict is reported: the metrics, and the rotation record (written on
    /// `tasks`, beside the drains).
    metrics: Metrics,
    client: kube::Client,
    record: RecordRef,
    tasks: TaskTracker,
}

impl HealthGate {
    pub(super) fn new(
        cfg: HealthConfig,
        metrics: Metrics,
        client: kube::Client,
        record: RecordRef,
        tasks: TaskTracker,
    ) -> Result<HealthGate, HttpError> {
        Ok(HealthGate {
            cfg,
            http: HttpClient::new()?,
            last: None,
            reported: None,
            metrics,
            client,
            record,
            tasks,
        })
    }

    /// A new leader asks afresh before its first start.
    pub(super) fn new_term(&mut self) {
        self.last = None;
        self.reported = None;
    }

    /// Whether a drain may start now: `Err` says which checks hold it and why.
    pub(super) async fn check(&mut self) -> Result<(), String> {
        if let Some((at, verdict)) = &self.last
            && at.elapsed() < self.cfg.interval
        {
            return verdict.clone();
        }
        let checks = self.cfg.checks();
        let asks = checks.iter().map(|check| async {
            let got = self.http.get(check.target(), self.cfg.timeout).await;
            let judged = check.judge(got);
            let result = judged
                .as_ref()
                .map_or_else(|u| u.kind.label(), |()| "healthy");
            self.metrics.health_check(check.kind(), result);
            judged
        });
        let results = futures::future::join_all(asks).await;
        let now = verdict(&results);
        self.last = Some((Instant::now(), now.clone()));
        self.report(&now);
        now
    }

    fn report(&mut self, now: &Result<(), String>) {
        let reason = now.as_ref().err().cloned().unwrap_or_default();
        let open = now.is_ok();
        if let Some(last) = &self.reported
            && last.open == open
            && last.reason == reason
        {
            return;
        }
        // "Since" is when it last opened or closed; a new reason while closed keeps it.
        let since = match &self.reported {
            Some(last) if last.open == open => last.since,
            _ => Timestamp::now(),
        };
        match now {
            Ok(()) if self.reported.is_some() => {
                tracing::info!("health gate open: every health check is healthy")
            }
            Ok(()) => tracing::debug!("health gate open: every health check is healthy"),
            Err(why) => tracing::warn!(%why, "health gate closed: no new drain starts"),
        }
        self.metrics.health_gate_open.set(i64::from(open));
        let state = HealthGateState {
            open,
            since,
            reason,
        };
        self.reported = Some(state.clone());
        // Beside the drains: the record is for people; a failed write only costs them the line.
        let (client, record) = (self.client.clone(), self.record.clone());
        self.tasks.spawn(async move {
            if let Err(e) = write_health(&client, &record, &state).await {
                tracing::warn!(configmap = %record.name, namespace = %record.namespace, error = %e, "could not write the health gate's state into the rotation record; `rotor-drainer status` will not show it (check the drainer's RBAC on configmaps)");
            }
        });
    }
}
