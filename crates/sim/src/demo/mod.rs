//! `rotor-sim demo`: rotor's main job, live, on a simulated cluster with the real binaries.
//!
//! The simulator runs in this process; `rotor-drainer run` and `rotor-selector` are the real
//! binaries, started as child processes against a kubeconfig in a scratch directory. The demo
//! raises the control-plane version and the node groups' template (or, with `--provider aws`,
//! publishes a new launch template version with a new image in moto), runs the selector on a
//! CronJob-like schedule, and shows progress until no outdated node is left; then a summary and
//! a per-node timeline.
//!
//! - [`progress`]: the pure model (snapshots in, counts, events and timelines out);
//! - [`view`]: reads the in-process cluster into snapshots; [`actions`]: changes it;
//! - [`children`]: the real binaries; [`aws`]: moto and the cloud glue;
//! - [`render`]: the terminal; [`summary`]: the result and the exit code.

mod actions;
mod aws;
mod children;
mod progress;
mod render;
mod summary;
mod view;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use tokio_util::sync::CancellationToken;

use crate::demo::children::{Drainer, SelectorCommand, SelectorRun};
use crate::demo::progress::Progress;
use crate::demo::render::Display;
use crate::demo::summary::{Ending, Facts};
use crate::demo::view::Shown;
use rotor_sim::scenario::{Scenario, parse_duration, version_minor};
use rotor_sim::server::Sim;

/// How often the demo looks at the cluster and redraws.
const POLL: Duration = Duration::from_millis(200);

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Provider {
    /// Control-plane upgrade: kubelets one minor version behind.
    Kubernetes,
    /// Image drift in Auto Scaling groups, against moto (the AWS emulator).
    Aws,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Scenario file; see examples/scenarios/README.md.
    #[arg(
        long,
        env = "ROTOR_DEMO_SCENARIO",
        default_value = "examples/scenarios/demo.yaml"
    )]
    scenario: PathBuf,
    /// What makes nodes out of date: `kubernetes` raises the control-plane version and the
    /// groups' kubelet version; `aws` publishes a new launch template version with a new image
    /// in moto (needs `moto[server]` installed).
    #[arg(
        long,
        env = "ROTOR_DEMO_PROVIDER",
        value_enum,
        default_value = "kubernetes"
    )]
    provider: Provider,
    /// How often the selector runs, as its CronJob would (a run still going skips the next
    /// tick, like concurrencyPolicy: Forbid).
    #[arg(long, env = "ROTOR_DEMO_SELECTOR_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    selector_interval: Duration,
    /// Run the scenario's clock this many times faster (node start-up, pod start-up and
    /// shutdown, autoscaler delays, jobs, the selector interval and the drainer's settle time).
    #[arg(long, env = "ROTOR_DEMO_SPEED", default_value = "1", value_parser = parse_speed)]
    speed: f64,
    /// One line per change instead of a live panel (the default when stdout is not a terminal).
    #[arg(long, env = "ROTOR_DEMO_PLAIN")]
    plain: bool,
    /// Give up (exit 1, saying what is stuck) after this long.
    #[arg(long, env = "ROTOR_DEMO_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    timeout: Duration,
    /// Nodes rotated at once: the selector's --max-tainted and the drainer's --max-concurrent
    /// and --max-unavailable.
    #[arg(long, env = "ROTOR_DEMO_MAX_TAINTED", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    max_tainted: u32,
    /// With `--provider kubernetes`: the control-plane version to upgrade to (default: the next
    /// minor version after the scenario's).
    #[arg(long, env = "ROTOR_DEMO_TO_VERSION")]
    to_version: Option<String>,
    /// Write the summary as JSON to this file as well.
    #[arg(long, env = "ROTOR_DEMO_SUMMARY_JSON")]
    summary_json: Option<PathBuf>,
    /// The rotor-drainer binary (default: beside this rotor-sim).
    #[arg(long, env = "ROTOR_DEMO_DRAINER_BIN")]
    drainer_bin: Option<PathBuf>,
    /// The rotor-selector binary (default: beside this rotor-sim).
    #[arg(long, env = "ROTOR_DEMO_SELECTOR_BIN")]
    selector_bin: Option<PathBuf>,
    /// Run this shell command as the selector instead of rotor-selector (with KUBECONFIG set),
    /// e.g. examples/selectors/kubelet-behind.sh: anything that puts the taint on is a selector.
    /// Kubernetes provider only.
    #[arg(
        long,
        env = "ROTOR_DEMO_SELECTOR_COMMAND",
        conflicts_with = "selector_bin"
    )]
    selector_command: Option<String>,
}

fn parse_speed(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("speed {s:?} is not a number (e.g. 1, 2, 0.5)"))?;
    if v.is_finite() && (0.05..=50.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("speed {s:?} must lie between 0.05 and 50"))
    }
}

/// Everything checked before anything starts.
struct Config {
    scenario_path: PathBuf,
    scenario: Scenario,
    provider: Provider,
    selector_interval: Duration,
    speed: f64,
    live: bool,
    timeout: Duration,
    max_tainted: u32,
    /// Kubernetes provider: (from, to) control-plane versions.
    upgrade: Option<(String, String)>,
    summary_json: Option<PathBuf>,
    drainer: PathBuf,
    selector: SelectorCommand,
}

impl Config {
    fn from_args(a: DemoArgs) -> Result<Config, String> {
        let mut scenario = Scenario::load(&a.scenario).map_err(|e| e.to_string())?;
        if scenario.node_groups.is_empty() {
            return Err(format!(
                "scenario {} has no node groups: there is nothing to rotate",
                a.scenario.display()
            ));
        }
        if a.selector_interval.is_zero() {
            return Err("--selector-interval must be longer than 0s".into());
        }
        let upgrade = match a.provider {
            Provider::Kubernetes => {
                let from = scenario.control_plane_version.clone();
                let to = match a.to_version {
                    Some(v) => v,
                    None => actions::next_minor(&from).ok_or_else(|| {
                        format!("cannot read the scenario's controlPlaneVersion {from:?}")
                    })?,
                };
                let (f, t) = (version_minor(&from), version_minor(&to));
                if t.is_none() || t <= f {
                    return Err(format!(
                        "--to-version {to:?} must be a version like v1.34.1 with a higher minor version than the scenario's control plane ({from})"
                    ));
                }
                Some((from, to))
            }
            Provider::Aws => {
                if a.to_version.is_some() {
                    return Err("--to-version applies to --provider kubernetes only".into());
                }
                if a.selector_command.is_some() {
                    return Err("--selector-command applies to --provider kubernetes only".into());
                }
                if rotor_sim::moto::command().is_none() {
                    return Err(format!(
                        "--provider aws runs against moto, the AWS emulator, which is not installed (neither `moto_server` nor `python3 -m moto.server` runs); install it with: {}",
                        rotor_sim::moto::INSTALL_HINT
                    ));
                }
                None
            }
        };
        let drainer = children::locate("rotor-drainer", a.drainer_bin.as_deref())?;
        let selector = match a.selector_command {
            Some(line) => SelectorCommand::Shell(line),
            None => {
                let bin = children::locate("rotor-selector", a.selector_bin.as_deref())?;
                let n = a.max_tainted.to_string();
                let mut args: Vec<String> = match a.provider {
                    Provider::Kubernetes => vec!["--provider".into(), "kubernetes".into()],
                    Provider::Aws => vec![
                        "--provider".into(),
                        "aws".into(),
                        "--cluster-name".into(),
                        aws::CLUSTER_NAME.into(),
                        "--image-drift".into(),
                    ],
                };
                args.extend(["--max-tainted".into(), n, "--output".into(), "json".into()]);
                SelectorCommand::Rotor { bin, args }
            }
        };
        scale_timing(&mut scenario, a.speed);
        Ok(Config {
            scenario_path: a.scenario,
            scenario,
            provider: a.provider,
            selector_interval: a.selector_interval.div_f64(a.speed),
            speed: a.speed,
            live: !a.plain && std::io::stdout().is_terminal(),
            timeout: a.timeout,
            max_tainted: a.max_tainted,
            upgrade,
            summary_json: a.summary_json,
            drainer,
            selector,
        })
    }
}

/// Runs the scenario's clock `speed` times faster.
fn scale_timing(s: &mut Scenario, speed: f64) {
    let f = |d: &mut Duration| *d = d.div_f64(speed);
    let t = &mut s.timing;
    // The tick stays fine enough to see every step, but no finer than 20ms.
    t.tick = t.tick.div_f64(speed).max(Duration::from_millis(20));
    for d in [
        &mut t.node_startup,
        &mut t.scale_up_delay,
        &mut t.scale_down_delay,
        &mut t.pod_startup,
        &mut t.pod_shutdown,
    ] {
        f(d);
    }
    for w in &mut s.workloads {
        w.startup.iter_mut().for_each(f);
        w.shutdown.iter_mut().for_each(f);
    }
}

/// `rotor-sim demo`: exit 0 only when the rotation completed without a budget violation; 1 when
/// it did not (time-out, violation, a child failing); 2 for bad flags or a missing binary or
/// moto; 130 when interrupted.
pub fn run(args: DemoArgs) -> ExitCode {
    let cfg = match Config::from_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rotor-sim demo: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(demo(cfg))
}

/// The scratch directory: kubeconfig and the children's logs.
fn work_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("rotor-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Seconds since `t0`.
fn secs(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64()
}

async fn demo(cfg: Config) -> ExitCode {
    let token = rotor_core::shutdown::shutdown_token();
    let dir = match work_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!(
                "rotor-sim demo: cannot create a scratch directory in {}: {e}",
                std::env::temp_dir().display()
            );
            return ExitCode::from(1);
        }
    };
    let mut display = Display::new(cfg.live);
    // The simulator has its own token: on Ctrl-C the children stop first, then the cluster.
    let sim_token = CancellationToken::new();
    let listen: SocketAddr = ([127, 0, 0, 1], 0).into();
    let running = match rotor_sim::server::start(&cfg.scenario, listen, sim_token).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rotor-sim demo: cannot start the simulated cluster on 127.0.0.1: {e}");
            return ExitCode::from(1);
        }
    };
    let sim = running.sim.clone();
    let kubeconfig = dir.join("kubeconfig");
    let (nodes, pods) = {
        let mut c = sim.cluster.lock().expect("cluster lock");
        // Where the drainer keeps its leader Lease, whatever the scenario lists.
        c.ensure_namespace("rotor-system", jiff::Timestamp::now());
        (c.nodes.len(), c.pods.len())
    };
    if let Err(e) = rotor_sim::server::write_kubeconfig(&kubeconfig, &running.url()) {
        eprintln!("rotor-sim demo: cannot write {}: {e}", kubeconfig.display());
        running.stop().await;
        return ExitCode::from(1);
    }
    display.say(&format!(
        "simulated cluster from {}: {nodes} nodes, {pods} pods, at {}",
        cfg.scenario_path.display(),
        running.url()
    ));
    display.say(&format!(
        "  look around while it runs: KUBECONFIG={} kubectl get nodes,pods -A",
        kubeconfig.display()
    ));

    let outcome = rotate(&cfg, &sim, &dir, &kubeconfig, &token, &mut display).await;
    running.stop().await;

    let summary = outcome.summary;
    for line in render::summary_text(&summary) {
        display.say(&line);
    }
    if let Some(path) = &cfg.summary_json {
        let text = serde_json::to_string_pretty(&summary).expect("summary serializes");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!(
                "rotor-sim demo: cannot write the summary to {}: {e}",
                path.display()
            );
            return ExitCode::from(1);
        }
    }
    let code = if outcome.interrupted {
        130
    } else {
        summary.exit_code()
    };
    if code == 0 {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        display.say(&format!(
            "logs kept in {} (drainer.log, selector.log)",
            dir.display()
        ));
    }
    ExitCode::from(code)
}

struct Outcome {
    summary: summary::Summary,
    interrupted: bool,
}

/// The rotation itself: children, upgrade, the CronJob loop, until done, stuck or interrupted.
async fn rotate(
    cfg: &Config,
    sim: &std::sync::Arc<Sim>,
    dir: &Path,
    kubeconfig: &Path,
    token: &CancellationToken,
    display: &mut Display,
) -> Outcome {
    let shown = match cfg.provider {
        Provider::Kubernetes => Shown::KubeletVersion,
        Provider::Aws => Shown::Image,
    };
    let facts = |elapsed: f64, runs: u32, failures: u32| {
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
                        v.time,
                        v.namespace,
                        v.pod,
                        v.via,
                        v.pdb,
                        v.healthy_after,
                        v.desired_healthy
                    )
                })
                .collect(),
        }
    };
    let fail = |progress: Progress, why: String, t0: Option<Instant>| Outcome {
        summary: summary::summarize(
            &progress,
            &Ending::Failed(why),
            facts(t0.map(secs).unwrap_or(0.0), 0, 0),
        ),
        interrupted: false,
    };
    let current = || {
        Progress::new(view::snapshot(
            &sim.cluster.lock().expect("cluster lock"),
            0.0,
            shown,
        ))
    };

    // The cloud, for the AWS variant: groups in moto, nodes bound to instances.
    let mut world = None;
    let mut selector_env = Vec::new();
    if cfg.provider == Provider::Aws {
        display.say("starting moto (the AWS emulator) and creating a launch template and an Auto Scaling group per node group ...");
        let mut w = match aws::AwsWorld::start(sim).await {
            Ok(w) => w,
            Err(e) => return fail(current(), format!("{e:#}"), None),
        };
        for _ in 0..20 {
            if let Err(e) = w.sync(sim).await {
                return fail(current(), format!("{e:#}"), None);
            }
            if w.unbound(sim) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        selector_env = w.selector_env();
        world = Some(w);
    }

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

    // The upgrade: from here on, nodes built from the old template are out of date.
    let t0 = Instant::now();
    let mut notes = Vec::new();
    match (&cfg.upgrade, world.as_mut()) {
        (Some((from, to)), _) => {
            let mut c = sim.cluster.lock().expect("cluster lock");
            actions::set_control_plane_version(&mut c, to);
            let groups = actions::set_templates(&mut c, Some(to), None);
            notes.push(format!("control plane upgraded from {from} to {to}"));
            notes.push(format!(
                "node group(s) {} now launch nodes with kubelet {to}",
                groups.join(", ")
            ));
        }
        (None, Some(w)) => {
            if let Err(e) = w.drift(sim).await {
                let _ = drainer.stop().await;
                return fail(current(), format!("{e:#}"), Some(t0));
            }
            notes.push(format!(
                "launch templates: version 2 with image {} is the default (the fleet runs {})",
                w.new_image, w.old_image
            ));
        }
        (None, None) => unreachable!("the AWS provider always has a world"),
    }
    let mut progress = Progress::new(view::snapshot(
        &sim.cluster.lock().expect("cluster lock"),
        0.0,
        shown,
    ));
    let title = format!(
        "rotor demo ({} provider, {}; {} node(s) at once)",
        format!("{:?}", cfg.provider).to_lowercase(),
        cfg.scenario_path.display(),
        cfg.max_tainted
    );
    let mut events: Vec<progress::Event> = notes
        .iter()
        .map(|n| progress.note(0.0, n.clone()))
        .collect();
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

    let selector_log = dir.join("selector.log");
    let mut inflight: Option<tokio::task::JoinHandle<SelectorRun>> = None;
    let mut next_run = Instant::now();
    let (mut runs, mut failures) = (0u32, 0u32);
    let mut first_tainted: BTreeMap<String, f64> = BTreeMap::new();
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ending = loop {
        tokio::select! {
            _ = token.cancelled() => break Ending::Interrupted,
            _ = tick.tick() => {}
        }
        let at = secs(t0);
        // The CronJob: one run per tick of the schedule, never two at once.
        if let Some(h) = inflight.take_if(|h| h.is_finished()) {
            runs += 1;
            let run = h.await.unwrap_or_else(|e| SelectorRun {
                ok: false,
                said: format!("panicked: {e}"),
            });
            if !run.ok {
                failures += 1;
            }
            let verdict = if run.ok { "" } else { "FAILED: " };
            events.push(progress.note(at, format!("selector run {runs}: {verdict}{}", run.said)));
        }
        if Instant::now() >= next_run {
            while next_run <= Instant::now() {
                next_run += cfg.selector_interval;
            }
            if inflight.is_none() {
                let (cmd, k, env, log) = (
                    cfg.selector.clone(),
                    kubeconfig.to_path_buf(),
                    selector_env.clone(),
                    selector_log.clone(),
                );
                inflight = Some(tokio::spawn(async move { cmd.run(&k, &env, &log).await }));
            }
        }
        if let Some(w) = world.as_mut() {
            match w.sync(sim).await {
                Ok(said) => events.extend(said.into_iter().map(|s| progress.note(at, s))),
                Err(e) => break Ending::Failed(format!("{e:#}")),
            }
        }
        let snap = {
            let mut c = sim.cluster.lock().expect("cluster lock");
            // Jobs count their work in scenario time, so they speed up with the rest.
            let scaled: BTreeMap<String, f64> = first_tainted
                .iter()
                .map(|(k, v)| (k.clone(), v * cfg.speed))
                .collect();
            let done = actions::finish_jobs(
                &mut c,
                actions::tainted_durations(&scaled, at * cfg.speed),
                jiff::Timestamp::now(),
            );
            for pod in done {
                let node = pod
                    .split_once('/')
                    .and_then(|(ns, name)| c.pods.get(ns, name))
                    .and_then(|p| p.spec.as_ref()?.node_name.clone())
                    .unwrap_or_default();
                events.push(progress.note(
                    at,
                    format!(
                        "job {pod} on {node} finished its work and exited; its node no longer waits for it"
                    ),
                ));
            }
            view::snapshot(&c, at, shown)
        };
        for n in snap.nodes.iter().filter(|n| n.taint.is_some()) {
            first_tainted.entry(n.name.clone()).or_insert(at);
        }
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
    let elapsed = secs(t0);
    if let Some(h) = inflight.take() {
        // Dropping the run kills its child.
        h.abort();
    }
    let stopped = drainer.stop().await;
    if !stopped.starts_with("stopped") {
        display.say(&format!("rotor-drainer {stopped}"));
    }
    drop(world);
    let interrupted = ending == Ending::Interrupted;
    Outcome {
        summary: summary::summarize(&progress, &ending, facts(elapsed, runs, failures)),
        interrupted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speed_must_be_a_sensible_factor() {
        assert_eq!(parse_speed("2"), Ok(2.0));
        assert_eq!(parse_speed(" 0.5 "), Ok(0.5));
        for bad in ["0", "-1", "fast", "NaN", "inf", "1000"] {
            assert!(parse_speed(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn speed_scales_the_scenario_clock() {
        let mut s = Scenario::from_yaml(
            "timing: {tick: 100ms, nodeStartup: 4s, scaleDownDelay: 2s}\nworkloads: [{kind: Deployment, name: w, startup: 1s}]",
            "t",
        )
        .unwrap();
        scale_timing(&mut s, 2.0);
        assert_eq!(s.timing.tick, Duration::from_millis(50));
        assert_eq!(s.timing.node_startup, Duration::from_secs(2));
        assert_eq!(s.timing.scale_down_delay, Duration::from_secs(1));
        assert_eq!(s.workloads[0].startup, Some(Duration::from_millis(500)));
        assert_eq!(s.workloads[0].shutdown, None);
        scale_timing(&mut s, 10.0);
        assert_eq!(
            s.timing.tick,
            Duration::from_millis(20),
            "the tick has a floor"
        );
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            demo: DemoArgs,
        }
        Wrap::command().debug_assert();
    }
}
