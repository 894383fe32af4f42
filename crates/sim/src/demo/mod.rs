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
//! - [`rotation`]: the rotation's loop (selector schedule, jobs, progress) until it ends;
//! - [`render`]: the terminal; [`summary`]: the result and the exit code.

mod actions;
mod aws;
mod children;
mod progress;
mod render;
mod rotation;
mod summary;
mod view;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use tokio_util::sync::CancellationToken;

use crate::demo::children::SelectorCommand;
use crate::demo::render::Display;
use rotor_sim::scenario::{Scenario, parse_duration, version_minor};

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
    /// Nodes tainted and drained at once at most: the selector's --max-tainted and the
    /// drainer's --max-concurrent and --max-unavailable. The scenario's RotationPolicies may
    /// allow fewer in a pool (demo.yaml: two general nodes, one system node).
    #[arg(long, env = "ROTOR_DEMO_MAX_TAINTED", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
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

    let outcome = rotation::rotate(&cfg, &sim, &dir, &kubeconfig, &token, &mut display).await;
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
