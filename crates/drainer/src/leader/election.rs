//! Leader election on a coordination.k8s.io/v1 Lease, so that of several drainer replicas only
//! one acts. Replicas contend only while a node needs rotor (or a policy's status is out of
//! date), and the leader releases the lease when neither has held for a while ([`Election`]),
//! so an idle drainer writes nothing. While
//! contending, the algorithm is the one client-go uses: the holder renews `renewTime` every
//! `renew_every`; another replica takes the lease over only when the record it observed has not
//! changed for a whole lease duration (its own, or the holder's if that is longer) by its own
//! clock (no trust in other clocks). Every write
//! is an update guarded by resourceVersion, so two candidates can never both win. (The
//! kube-lease-manager crate uses server-side apply instead, which the simulator does not serve.)

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::leader::fence::Fence;

#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_every: Duration,
}

/// What one replica remembers of the lease between attempts.
#[derive(Default)]
struct Observed {
    holder: Option<String>,
    renew: Option<String>,
    since: Option<Instant>,
    /// Who held the lease when we last found another replica holding it: named when this
    /// replica loses it.
    holder_seen: Option<String>,
    /// The lease as our last successful write returned it. While we hold the lease, the next
    /// renewal starts from it instead of reading the lease again: one request per renewal, and
    /// if anyone else wrote in between, the resourceVersion guard refuses ours (409) and the
    /// same attempt reads afresh ([`try_hold`]).
    written: Option<Lease>,
}

/// The decision for one attempt, from the lease as read: pure, so the rules are testable.
#[derive(Debug, PartialEq, Eq)]
pub enum Attempt {
    /// We hold it: renew.
    Renew,
    /// Free or expired: take it.
    Acquire,
    /// Someone else holds a live lease.
    Follow { holder: String },
}

/// `lease_duration` is this replica's own `--lease-duration`. A held lease expires only once it
/// has been unchanged for the longer of that and the duration its holder wrote into it: while a
/// Deployment rolls from a longer duration to a shorter one, the old leader goes on acting for
/// two thirds of its own (longer) duration after its last renewal, and a new replica that went
/// by its shorter one would take the lease while the old leader may still write.
pub fn decide(
    spec: Option<&LeaseSpec>,
    me: &str,
    unchanged_for: Option<Duration>,
    lease_duration: Duration,
) -> Attempt {
    let holder = spec
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty());
    let holders_duration = spec
        .and_then(|s| s.lease_duration_seconds)
        .and_then(|s| u64::try_from(s).ok())
        .map(Duration::from_secs)
        .unwrap_or_default();
    match holder {
        None => Attempt::Acquire,
        Some(h) if h == me => Attempt::Renew,
        Some(h) => match unchanged_for {
            Some(d) if d >= lease_duration.max(holders_duration) => Attempt::Acquire,
            _ => Attempt::Follow { holder: h },
        },
    }
}

fn lease_spec(cfg: &LeaderConfig, transitions: i32, acquired: Option<MicroTime>) -> LeaseSpec {
    let now = MicroTime(Timestamp::now());
    LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(cfg.lease_duration.as_secs().max(1) as i32),
        acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
        renew_time: Some(now),
        lease_transitions: Some(transitions),
        ..Default::default()
    }
}

/// What one attempt found.
#[derive(Debug, PartialEq, Eq)]
enum Hold {
    /// Our write went through: we hold the lease.
    Held,
    /// Another replica holds a live lease.
    Follow,
    /// Our write was refused as stale (409): the lease changed since we read it. Not a
    /// change of hands by itself; the next read tells.
    Conflict,
}

/// One attempt to hold the lease. A renewal from our last write refused as stale reads the
/// lease and decides again at once: kube's client resends a write answered 503 or 504 that
/// the API server may have applied, and our own resend then conflicts with our own write; an
/// annotation put on the Lease by hand conflicts too. Either leaves us the holder.
async fn try_hold(
    api: &Api<Lease>,
    cfg: &LeaderConfig,
    seen: &mut Observed,
) -> Result<Hold, kube::Error> {
    let from_our_write = seen.written.is_some();
    match try_hold_from(api, cfg, seen).await? {
        Hold::Conflict if from_our_write => try_hold_from(api, cfg, seen).await,
        hold => Ok(hold),
    }
}

/// [`try_hold`]'s one write: from the lease as last written if we have it, else as read now.
async fn try_hold_from(
    api: &Api<Lease>,
    cfg: &LeaderConfig,
    seen: &mut Observed,
) -> Result<Hold, kube::Error> {
    let cached = seen.written.take();
    let current = match cached {
        Some(l) => Some(l),
        None => api.get_opt(&cfg.name).await?,
    };
    let current = match current {
        Some(l) => l,
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(lease_spec(cfg, 0, None)),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    seen.written = Some(created);
                    Ok(Hold::Held)
                }
                // Another replica created it first: the next attempt reads it.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Hold::Conflict),
                Err(e) => Err(e),
            };
        }
    };
    let spec = current.spec.as_ref();
    let holder = spec.and_then(|s| s.holder_identity.clone());
    let renew = spec
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0.to_string());
    if seen.holder != holder || seen.renew != renew || seen.since.is_none() {
        *seen = Observed {
            holder,
            renew,
            since: Some(Instant::now()),
            holder_seen: None,
            written: None,
        };
    }
    let unchanged_for = seen.since.map(|s| s.elapsed());
    let attempt = decide(spec, &cfg.identity, unchanged_for, cfg.lease_duration);
    let (transitions, acquired) = match &attempt {
        Attempt::Follow { holder } => {
            seen.holder_seen = Some(holder.clone());
            return Ok(Hold::Follow);
        }
        Attempt::Renew => (
            spec.and_then(|s| s.lease_transitions).unwrap_or(0),
            spec.and_then(|s| s.acquire_time.clone()),
        ),
        Attempt::Acquire => (
            spec.and_then(|s| s.lease_transitions).unwrap_or(0) + 1,
            None,
        ),
    };
    let mut lease = current.clone();
    lease.spec = Some(lease_spec(cfg, transitions, acquired));
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(written) => {
            seen.written = Some(written);
            if attempt == Attempt::Acquire {
                tracing::info!(lease = %cfg.name, identity = %cfg.identity, "acquired the leader lease");
            }
            Ok(Hold::Held)
        }
        // Someone else wrote first. Acquiring, they win this round; renewing, the lease
        // changed under us, and only a read that shows another holder ends our term.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Hold::Conflict),
        Err(e) => Err(e),
    }
}

/// When renewals go out. The next renewal is due `renew_every` after the last was *sent*, so a
/// slow API server does not push each renewal later than the one before until the fence
/// (`renew_deadline` from the send) closes between them. A failed renewal is tried again soon
/// (a quarter of `renew_every`) while the deadline allows: one failed or slow answer must not
/// end a term that a retry would have kept.
#[derive(Clone, Copy, Debug)]
struct RenewTiming {
    renew_every: Duration,
    renew_deadline: Duration,
}

impl RenewTiming {
    /// How long an attempt may take, given how long ago the last successful renewal was sent
    /// (`None`: not holding): `renew_every`, and while holding no later than the deadline. A
    /// renewal answered after the deadline is no use, one answered before it is, however slow.
    fn attempt_timeout(&self, since_success: Option<Duration>) -> Duration {
        let left = since_success.map_or(self.renew_every, |since| {
            self.renew_deadline.saturating_sub(since)
        });
        left.min(self.renew_every)
    }

    /// When to try next (at `now`), after an attempt sent at `sent`; `retry` when it failed
    /// while holding the lease.
    fn next_try(&self, sent: Instant, now: Instant, retry: bool) -> Instant {
        if retry {
            now + self.renew_every / 4
        } else {
            (sent + self.renew_every).max(now)
        }
    }
}

/// What the controller asks of the election task.
enum Request {
    /// Start contending for the lease (a node needs rotor).
    Contend,
    /// Stop contending and release the lease if held; answered once released.
    StandDown(oneshot::Sender<()>),
}

/// One replica's part in the election. A replica contends for the lease only while a node needs
/// rotor ([`Election::contend`]), and the leader hands it back once none has for a while
/// ([`Election::stand_down`]): an idle fleet of replicas sends no request but their watches, and
/// a new leader is chosen the moment there is work again. While contending, the rules are
/// client-go's (see the module comment).
pub struct Election {
    /// Whether this replica leads now. It may act only while this is true.
    pub leading: watch::Receiver<bool>,
    /// Until when this replica's writes may go out: moved forward by each renewal, closed when
    /// the lease is released or lost (see [`crate::leader::fence`]).
    fence: Fence,
    /// Cancelled when a lease this replica held was lost rather than released (a renewal failed
    /// for a whole lease duration, or another replica took it): whatever it is doing must stop.
    pub lost: CancellationToken,
    requests: mpsc::UnboundedSender<Request>,
    contending: bool,
    task: tokio::task::JoinHandle<()>,
}

impl Election {
    /// Starts the election task, not contending. It ends when `cancel` is cancelled, releasing
    /// the lease if it holds it. `client` must not be fenced by `fence` (it writes the lease
    /// while the fence is closed); the acting clients are.
    pub fn start(
        client: kube::Client,
        cfg: LeaderConfig,
        fence: Fence,
        cancel: CancellationToken,
    ) -> Election {
        let (tx, leading) = watch::channel(false);
        let (requests, rx) = mpsc::unbounded_channel();
        let lost = CancellationToken::new();
        let task = tokio::spawn(elect(
            client,
            cfg,
            cancel,
            Leading {
                tx,
                fence: fence.clone(),
            },
            rx,
            lost.clone(),
        ));
        Election {
            leading,
            fence,
            lost,
            requests,
            contending: false,
            task,
        }
    }

    /// Whether this replica leads now (never once the election task has ended, nor once its
    /// last renewal is too old for its writes to go out).
    pub fn is_leading(&self) -> bool {
        *self.leading.borrow() && self.leading.has_changed().is_ok() && self.fence.is_open()
    }

    /// Whether this replica contends for the lease (or holds it).
    pub fn is_contending(&self) -> bool {
        self.contending
    }

    /// Contends for the lease from now on; nothing if it already does.
    pub fn contend(&mut self) {
        if !self.contending {
            self.contending = self.requests.send(Request::Contend).is_ok();
        }
    }

    /// Stops contending. If this replica leads, it stops leading (`leading` turns false) and
    /// releases the lease before this returns, so no other replica can act while it still does.
    pub async fn stand_down(&mut self) {
        self.contending = false;
        let (ack, done) = oneshot::channel();
        if self.requests.send(Request::StandDown(ack)).is_ok() {
            let _ = done.await;
        }
    }

    /// Waits for the election task to end (after its `cancel` was cancelled).
    pub async fn join(self) {
        let _ = self.task.await;
    }
}

/// The election task's side of "this replica leads": the flag the controller reads and the
/// fence its clients' writes pass.
struct Leading {
    tx: watch::Sender<bool>,
    fence: Fence,
}

impl Leading {
    /// A renewal sent at `sent` succeeded: lead, and write until `sent + renew_deadline`.
    fn renewed(&self, sent: Instant, renew_deadline: Duration) {
        self.fence.open_until(sent + renew_deadline);
        self.tx.send_if_modified(|v| !std::mem::replace(v, true));
    }

    /// Stop leading: the fence closes first, so no write goes out after this. Returns whether
    /// this replica was leading.
    fn stop(&self) -> bool {
        self.fence.close();
        self.tx.send_if_modified(|v| std::mem::replace(v, false))
    }
}

/// How one attempt at holding the lease went.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Renewal {
    /// Held: acquired or renewed.
    Held,
    /// No answer, an error, or a conflict after a fresh read: retried within the deadline.
    Failed,
    /// Another replica holds it.
    Taken,
}

async fn elect(
    client: kube::Client,
    cfg: LeaderConfig,
    cancel: CancellationToken,
    leading: Leading,
    mut requests: mpsc::UnboundedReceiver<Request>,
    lost: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut seen = Observed::default();
    let mut contending = false;
    let mut last_success: Option<Instant> = None;
    let mut next_try = tokio::time::Instant::now();
    // As client-go's renewDeadline: a leader that has not renewed for two thirds of the lease
    // stops leading, before any other replica may take the lease over (a whole lease duration
    // after it last saw a change). Each request is bounded so that this is checked in time even
    // when the API server hangs or kube's retry keeps a request going.
    let renew_deadline = cfg.lease_duration.mul_f64(2.0 / 3.0);
    let attempt_timeout = cfg.renew_every;
    let timing = RenewTiming {
        renew_every: cfg.renew_every,
        renew_deadline,
    };
    loop {
        if contending && tokio::time::Instant::now() >= next_try {
            // The fence runs from when the renewal was sent: another replica counts its lease
            // duration from when it saw the renewal, which is later.
            let sent = Instant::now();
            let timeout = timing.attempt_timeout(last_success.map(|t| t.elapsed()));
            let attempt = tokio::time::timeout(timeout, try_hold(&api, &cfg, &mut seen));
            let outcome = match attempt.await {
                Ok(Ok(Hold::Held)) => {
                    last_success = Some(sent);
                    leading.renewed(sent, renew_deadline);
                    Renewal::Held
                }
                // Our renewal conflicted even after a fresh read (the lease keeps changing
                // under us, or our resends keep conflicting): a failed renewal, retried while
                // the deadline allows, as client-go does.
                Ok(Ok(Hold::Conflict)) if last_success.is_some() => {
                    tracing::warn!(lease = %cfg.name, namespace = %cfg.namespace, "renewing the leader lease conflicted with another write to it (409) after a fresh read; will retry");
                    Renewal::Failed
                }
                Ok(Ok(Hold::Follow | Hold::Conflict)) => {
                    if last_success.is_some() {
                        let holder = seen.holder_seen.as_deref().unwrap_or("another replica");
                        tracing::error!(lease = %cfg.name, namespace = %cfg.namespace, %holder, "the leader lease is held by {holder} now: this replica stops acting and exits; its drains stay recorded on their nodes for the leader to resume");
                    }
                    last_success = None;
                    Renewal::Taken
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %cfg.name, namespace = %cfg.namespace, error = %e, "could not read or renew the leader lease; will retry");
                    Renewal::Failed
                }
                Err(_) => {
                    tracing::warn!(lease = %cfg.name, namespace = %cfg.namespace, ?timeout, "reading or renewing the leader lease timed out; will retry");
                    // The request may or may not have been applied: read afresh next time.
                    seen = Observed::default();
                    Renewal::Failed
                }
            };
            let failed = outcome == Renewal::Failed;
            // A failed renewal costs the lease only once the deadline has passed since the last
            // one that succeeded (at once while none has).
            let lose = match outcome {
                Renewal::Held => false,
                Renewal::Taken => true,
                Renewal::Failed => last_success.is_none_or(|t| t.elapsed() >= renew_deadline),
            };
            // A held lease that is lost is reported once, and this replica stops contending:
            // the runtime exits, and a restart rejoins the election.
            if lose && leading.stop() {
                if failed {
                    tracing::error!(lease = %cfg.name, namespace = %cfg.namespace, deadline = ?renew_deadline, "the leader lease could not be renewed within its deadline (two thirds of --lease-duration): this replica stops acting and exits; its drains stay recorded on their nodes for the next leader to resume (check the API server's health and the drainer's RBAC on leases)");
                }
                lost.cancel();
                contending = false;
            }
            next_try = tokio::time::Instant::from_std(timing.next_try(
                sent,
                Instant::now(),
                failed && last_success.is_some(),
            ));
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep_until(next_try), if contending => {}
            request = requests.recv() => match request {
                None => break,
                Some(Request::Contend) => {
                    if !contending && !lost.is_cancelled() {
                        contending = true;
                        // A lease seen before standing down says nothing of its holder now.
                        seen = Observed::default();
                        next_try = tokio::time::Instant::now();
                    }
                }
                Some(Request::StandDown(ack)) => {
                    contending = false;
                    if leading.stop() {
                        release(&api, &cfg, attempt_timeout).await;
                    }
                    last_success = None;
                    let _ = ack.send(());
                }
            },
        }
    }
    // Hand the lease over at once on shutdown instead of making the next leader wait.
    if leading.stop() {
        release(&api, &cfg, attempt_timeout).await;
    }
}

/// Gives up the lease if this replica still holds it (no holder, and a one-second duration for
/// readers that only look at the times), within `timeout`; otherwise the next leader waits for
/// the lease to expire.
async fn release(api: &Api<Lease>, cfg: &LeaderConfig, timeout: Duration) {
    if tokio::time::timeout(timeout, write_release(api, cfg))
        .await
        .is_err()
    {
        tracing::warn!(lease = %cfg.name, ?timeout, "releasing the leader lease timed out; the next leader waits for it to expire");
    }
}

async fn write_release(api: &Api<Lease>, cfg: &LeaderConfig) {
    let mut lease = match api.get_opt(&cfg.name).await {
        Ok(Some(lease)) => lease,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(lease = %cfg.name, error = %e, "could not release the leader lease; the next leader waits for it to expire");
            return;
        }
    };
    let Some(spec) = lease.spec.as_mut() else {
        return;
    };
    if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
        return;
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(_) => tracing::info!(lease = %cfg.name, "released the leader lease"),
        Err(e) => {
            tracing::warn!(lease = %cfg.name, error = %e, "could not release the leader lease; the next leader waits for it to expire")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(h: &str) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(h.into()),
            ..Default::default()
        }
    }

    #[test]
    fn renewals_are_timed_from_their_send_and_a_failed_one_is_retried_within_the_deadline() {
        // --lease-duration 15s: renew every 5 s, act until 10 s after a renewal's send.
        let timing = RenewTiming {
            renew_every: Duration::from_secs(5),
            renew_deadline: Duration::from_secs(10),
        };
        let secs = Duration::from_secs;
        // Acquiring, or a renewal 5 s after the last: 5 s to answer.
        assert_eq!(timing.attempt_timeout(None), secs(5));
        assert_eq!(timing.attempt_timeout(Some(secs(5))), secs(5));
        // A retry 7.5 s after the last success may take only what is left before the deadline.
        assert_eq!(
            timing.attempt_timeout(Some(Duration::from_millis(7500))),
            Duration::from_millis(2500)
        );
        assert_eq!(timing.attempt_timeout(Some(secs(11))), Duration::ZERO);
        // A renewal that took 4 s is followed by the next 1 s later, 5 s after its send, not
        // 5 s after its answer (which would leave the fence closed from 10 s to 13 s).
        let sent = Instant::now();
        let answered = sent + secs(4);
        assert_eq!(timing.next_try(sent, answered, false), sent + secs(5));
        // A renewal slower than renew_every: the next at once.
        assert_eq!(timing.next_try(sent, sent + secs(6), false), sent + secs(6));
        // Failed while holding: again in 1.25 s, twice or more before the deadline.
        assert_eq!(
            timing.next_try(sent, answered, true),
            answered + Duration::from_millis(1250)
        );
    }

    #[test]
    fn free_or_empty_leases_are_acquired() {
        let d = Duration::from_secs(15);
        assert_eq!(decide(None, "a", None, d), Attempt::Acquire);
        assert_eq!(decide(Some(&held_by("")), "a", None, d), Attempt::Acquire);
    }

    #[test]
    fn own_lease_is_renewed_and_others_are_followed_until_they_go_quiet() {
        let d = Duration::from_secs(15);
        assert_eq!(
            decide(Some(&held_by("a")), "a", Some(Duration::from_secs(100)), d),
            Attempt::Renew
        );
        assert_eq!(
            decide(Some(&held_by("b")), "a", Some(Duration::from_secs(14)), d),
            Attempt::Follow { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&held_by("b")), "a", Some(Duration::from_secs(15)), d),
            Attempt::Acquire
        );
        assert_eq!(
            decide(Some(&held_by("b")), "a", None, d),
            Attempt::Follow { holder: "b".into() }
        );
    }

    #[test]
    fn a_lease_written_with_a_longer_duration_than_ours_lasts_that_long() {
        // A leader still on --lease-duration=60s while this replica runs with 15s: the leader
        // acts for up to 40 s after its last renewal, so 15 s of silence is not enough.
        let ours = Duration::from_secs(15);
        let written_with = |secs| LeaseSpec {
            lease_duration_seconds: Some(secs),
            ..held_by("b")
        };
        let quiet = |secs| Some(Duration::from_secs(secs));
        assert_eq!(
            decide(Some(&written_with(60)), "a", quiet(15), ours),
            Attempt::Follow { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&written_with(60)), "a", quiet(59), ours),
            Attempt::Follow { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&written_with(60)), "a", quiet(60), ours),
            Attempt::Acquire
        );
        // A shorter written duration does not shorten ours: a holder's clock or flags are not
        // trusted to let us take over sooner than our own rule allows.
        assert_eq!(
            decide(Some(&written_with(5)), "a", quiet(10), ours),
            Attempt::Follow { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&written_with(5)), "a", quiet(15), ours),
            Attempt::Acquire
        );
        // Nonsense written by someone else (negative) counts as nothing.
        assert_eq!(
            decide(Some(&written_with(-7)), "a", quiet(15), ours),
            Attempt::Acquire
        );
    }
}
