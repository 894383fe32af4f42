//! The rotation itself: the cloud (for the AWS variant), the drainer, the upgrade that makes
//! nodes out of date, then the loop that runs the selector on its schedule, lets jobs finish,
//! and watches progress until the fleet is rotated, something is stuck, or the user interrupts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::aws::AwsWorld;
use super::children::{self, Drainer, SelectorCommand, SelectorRun};
use super::progress::{self, Progress};
use super::render::Display;
use super::summary::{self, Ending, Facts};
use super::view::{self, Shown};
use super::{Config, POLL, Provider, actions, secs};
use rotor_sim::server::Sim;

/// How long a completed rotation waits at most for the drainer's last status writes on the
/// RotationPolicies: it writes each at most every 5 s, on a pass (at least one a second), and
/// a loaded machine may be late.
const POOLS_SETTLE: Duration = Duration::from_secs(10);

pub(super) struct Outcome {
    pub(super) summary: summary::Summary,
    pub(super) interrupted: bool,
}

/// Starts what the rotation needs, upgrades, and runs it until done, stuck or interrupted.
pub(super) async fn rotate(
    cfg: &Config,
    sim: &Arc<Sim>,
    dir: &Path,
    kubeconfig: &Path,
    token: &CancellationToken,
    display: &mut Display,
) -> Outcome {
    let shown = match cfg.provider {
        Provider::Kubernetes => Shown::KubeletVersion,
        Provider::Aws => Shown::Image,
    };
    let current = || {
        Progress::new(view::snapshot(
            &sim.cluster.lock().expect("cluster lock"),
            0.0,
            shown,
        ))
    };
    let fail = |progress: Progress, why: String, t0: Option<Instant>| Outcome {
        summary: summary::summarize(
            &progress,
            &Ending::Failed(why),
            facts(cfg, sim, t0.map(secs).unwrap_or(0.0), 0, 0),
        ),
        interrupted: false,
    };

    let mut world = match start_cloud(cfg, sim, display).await {
        Ok(w) => w,
        Err(e) => return fail(current(), e, None),
    };
    let mut drainer = match Drainer::start(
        &cfg.drainer,
        kubeconfig,
        dir.join("drainer.log"),
        cfg.max_tainted,
        Duration::from_secs(1).div_f64(cfg.speed),
    ) {
        Ok(d) => d,
        Err(e) => return fail(current(), e, None),
    };

    // From here on, nodes built from the old template are out of date.
    let t0 = Instant::now();
    let notes = match upgrade(cfg, sim, world.as_mut()).await {
        Ok(notes) => notes,
        Err(e) => {
            let _ = drainer.stop().await;
            return fail(current(), e, Some(t0));
        }
    };
    let mut progress = current();
    let mut events: Vec<progress::Event> =
        notes.into_iter().map(|n| progress.note(0.0, n)).collect();
    events.push(progress.note(
        0.0,
        format!(
            "{} node(s) out of date; the selector runs every {:.1}s",
            progress.initially_outdated(),
            cfg.selector_interval.as_secs_f64()
        ),
    ));
    if progress.initially_outdated() == 0 {
        let _ = drainer.stop().await;
        return fail(
            progress,
            "the upgrade left no node out of date: nothing to rotate".into(),
            Some(t0),
        );
    }

    let env = world
        .as_ref()
        .map(AwsWorld::selector_env)
        .unwrap_or_default();
    let mut cron = SelectorCron::new(cfg, kubeconfig, env, dir.join("selector.log"));
    let mut jobs = Jobs::default();
    let title = format!(
        "rotor demo ({} provider, {}; {} node(s) at once)",
        format!("{:?}", cfg.provider).to_lowercase(),
        cfg.scenario_path.display(),
        cfg.max_tainted
    );
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ending = loop {
        tokio::select! {
            _ = token.cancelled() => break Ending::Interrupted,
            _ = tick.tick() => {}
        }
        let at = secs(t0);
        if let Some(said) = cron.poll().await {
            events.push(progress.note(at, said));
        }
        if let Some(w) = world.as_mut() {
            match w.sync(sim).await {
                Ok(said) => events.extend(said.into_iter().map(|s| progress.note(at, s))),
                Err(e) => break Ending::Failed(format!("{e:#}")),
            }
        }
        let (snap, said) = jobs.step(sim, cfg.speed, at, shown);
        events.extend(said.into_iter().map(|s| progress.note(at, s)));
        events.extend(progress.observe(snap));
        display.update(&title, &progress, &events, at);
        events.clear();
        if let Some(status) = drainer.exited() {
            // Ctrl-C in a terminal reaches the drainer too; that is an interruption, not a failure.
            if token.is_cancelled() {
                break Ending::Interrupted;
            }
            break Ending::Failed(format!(
                "rotor-drainer exited ({status}); the end of its log:\n{}",
                children::tail(&drainer.log, 15)
            ));
        }
        if progress.complete() {
            break Ending::Completed;
        }
        if t0.elapsed() >= cfg.timeout {
            break Ending::TimedOut;
        }
    };
    // The rotation's time, taken when the last node was replaced: the wait below is for the
    // drainer's status writes, not for the rotation.
    let elapsed = secs(t0);
    cron.stop();
    if ending == Ending::Completed {
        // The drainer writes a pool's status at most every few seconds: the summary waits for
        // the last write, so that it shows the pools as rotated, not a moment before.
        let until = Instant::now() + POOLS_SETTLE;
        loop {
            let unsettled = progress
                .last()
                .map(progress::unsettled_pools)
                .unwrap_or_default();
            if unsettled.is_empty() || drainer.exited().is_some() {
                break;
            }
            if Instant::now() >= until {
                display.say(&format!(
                    "after {} s the drainer's status still shows {}; the summary shows the pools as last written",
                    POOLS_SETTLE.as_secs(),
                    unsettled.join(", ")
                ));
                break;
            }
            tokio::select! {
                _ = token.cancelled() => break,
                _ = tick.tick() => {}
            }
            let at = secs(t0);
            let (snap, said) = jobs.step(sim, cfg.speed, at, shown);
            let mut news: Vec<progress::Event> =
                said.into_iter().map(|s| progress.note(at, s)).collect();
            news.extend(progress.observe(snap));
            display.update(&title, &progress, &news, at);
        }
    }
    let stopped = drainer.stop().await;
    if !stopped.starts_with("stopped") {
        display.say(&format!("rotor-drainer {stopped}"));
    }
    drop(world);
    let interrupted = ending == Ending::Interrupted;
    Outcome {
        summary: summary::summarize(
            &progress,
            &ending,
            facts(cfg, sim, elapsed, cron.runs, cron.failures),
        ),
        interrupted,
    }
}

/// What the summary reports besides the progress: the run's settings and the cluster's own
/// tally of unschedulable time and budget violations.
fn facts(cfg: &Config, sim: &Sim, elapsed: f64, runs: u32, failures: u32) -> Facts {
    let c = sim.cluster.lock().expect("cluster lock");
    Facts {
        provider: format!("{:?}", cfg.provider).to_lowercase(),
        scenario: cfg.scenario_path.display().to_string(),
        elapsed,
        selector_runs: runs,
        selector_failures: failures,
        unschedulable_pod_seconds: c.stats.unschedulable_pod_seconds,
        violations: c
            .stats
            .budget_violations
            .iter()
            .map(|v| {
                format!(
                    "{} pod {}/{} by {}: budget {} left {} healthy of {} required",
                    v.time, v.namespace, v.pod, v.via, v.pdb, v.healthy_after, v.desired_healthy
                )
            })
            .collect(),
    }
}

/// The cloud, for the AWS variant: groups in moto, and every node bound to an instance.
async fn start_cloud(
    cfg: &Config,
    sim: &Arc<Sim>,
    display: &mut Display,
) -> Result<Option<AwsWorld>, String> {
    if cfg.provider != Provider::Aws {
        return Ok(None);
    }
    display.say("starting moto (the AWS emulator) and creating a launch template and an Auto Scaling group per node group ...");
    let mut world = AwsWorld::start(sim).await.map_err(|e| format!("{e:#}"))?;
    for _ in 0..20 {
        world.sync(sim).await.map_err(|e| format!("{e:#}"))?;
        if world.unbound(sim) == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(Some(world))
}

/// The upgrade that makes the fleet out of date: a new control-plane and kubelet version, or
/// (AWS) a new default launch template version with a new image. Returns what it did.
async fn upgrade(
    cfg: &Config,
    sim: &Arc<Sim>,
    world: Option<&mut AwsWorld>,
) -> Result<Vec<String>, String> {
    match (&cfg.upgrade, world) {
        (Some((from, to)), _) => {
            let mut c = sim.cluster.lock().expect("cluster lock");
            actions::set_control_plane_version(&mut c, to);
            let groups = actions::set_templates(&mut c, Some(to), None);
            Ok(vec![
                format!("control plane upgraded from {from} to {to}"),
                format!(
                    "node group(s) {} now launch nodes with kubelet {to}",
                    groups.join(", ")
                ),
            ])
        }
        (None, Some(w)) => {
            w.drift(sim).await.map_err(|e| format!("{e:#}"))?;
            Ok(vec![format!(
                "launch templates: version 2 with image {} is the default (the fleet runs {})",
                w.new_image, w.old_image
            )])
        }
        (None, None) => unreachable!("the AWS provider always has a world"),
    }
}

/// The selector's CronJob: one run per tick of the schedule, never two at once (a run still
/// going skips the tick, like `concurrencyPolicy: Forbid`).
struct SelectorCron {
    command: SelectorCommand,
    kubeconfig: PathBuf,
    env: Vec<(&'static str, String)>,
    log: PathBuf,
    interval: Duration,
    next_run: Instant,
    running: Option<JoinHandle<SelectorRun>>,
    runs: u32,
    failures: u32,
}

impl SelectorCron {
    fn new(
        cfg: &Config,
        kubeconfig: &Path,
        env: Vec<(&'static str, String)>,
        log: PathBuf,
    ) -> SelectorCron {
        SelectorCron {
            command: cfg.selector.clone(),
            kubeconfig: kubeconfig.to_path_buf(),
            env,
            log,
            interval: cfg.selector_interval,
            next_run: Instant::now(),
            running: None,
            runs: 0,
            failures: 0,
        }
    }

    /// Collects a finished run (returning what it said) and starts the next one when due.
    async fn poll(&mut self) -> Option<String> {
        let mut said = None;
        if let Some(h) = self.running.take_if(|h| h.is_finished()) {
            self.runs += 1;
            let run = h.await.unwrap_or_else(|e| SelectorRun {
                ok: false,
                said: format!("panicked: {e}"),
            });
            if !run.ok {
                self.failures += 1;
            }
            let verdict = if run.ok { "" } else { "FAILED: " };
            said = Some(format!("selector run {}: {verdict}{}", self.runs, run.said));
        }
        if Instant::now() >= self.next_run {
            while self.next_run <= Instant::now() {
                self.next_run += self.interval;
            }
            if self.running.is_none() {
                let (cmd, k, env, log) = (
                    self.command.clone(),
                    self.kubeconfig.clone(),
                    self.env.clone(),
                    self.log.clone(),
                );
                self.running = Some(tokio::spawn(async move { cmd.run(&k, &env, &log).await }));
            }
        }
        said
    }

    /// Stops a run still going (dropping it kills its child).
    fn stop(&mut self) {
        if let Some(h) = self.running.take() {
            h.abort();
        }
    }
}

/// The scenario's jobs, which finish their work after a time counted from their node's taint.
#[derive(Default)]
struct Jobs {
    /// When each node was first seen tainted, in seconds since the upgrade.
    first_tainted: BTreeMap<String, f64>,
}

impl Jobs {
    /// Ends the jobs whose work is done, and snapshots the cluster; returns the snapshot and
    /// a line per finished job.
    fn step(
        &mut self,
        sim: &Sim,
        speed: f64,
        at: f64,
        shown: Shown,
    ) -> (progress::Snapshot, Vec<String>) {
        let mut c = sim.cluster.lock().expect("cluster lock");
        // Jobs count their work in scenario time, so they speed up with the rest.
        let scaled: BTreeMap<String, f64> = self
            .first_tainted
            .iter()
            .map(|(k, v)| (k.clone(), v * speed))
            .collect();
        let done = actions::finish_jobs(
            &mut c,
            actions::tainted_durations(&scaled, at * speed),
            jiff::Timestamp::now(),
        );
        let said = done
            .into_iter()
            .map(|pod| {
                let node = pod
                    .split_once('/')
                    .and_then(|(ns, name)| c.pods.get(ns, name))
                    .and_then(|p| p.spec.as_ref()?.node_name.clone())
                    .unwrap_or_default();
                format!(
                    "job {pod} on {node} finished its work and exited; its node no longer waits for it"
                )
            })
            .collect();
        let snap = view::snapshot(&c, at, shown);
        for n in snap.nodes.iter().filter(|n| n.taint.is_some()) {
            self.first_tainted.entry(n.name.clone()).or_insert(at);
        }
        (snap, said)
    }
}
