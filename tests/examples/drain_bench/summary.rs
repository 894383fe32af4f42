//! The figures of every run, gathered: one table of medians per backend and concurrency, the
//! two backends side by side with the figures that differ by more than 15 %, and the targets of
//! issue 20 (printed as PASS or MISS; a benchmark reports, it does not assert).

use crate::Args;
use crate::cluster::Backend;
use crate::compare::RunResult;

/// Issue 20's targets.
const SIM_VS_BOUND_AT_3: f64 = 1.10;
const REAL_VS_BOUND: f64 = 1.25;
const REAL_VS_KUBECTL: f64 = 0.5;
/// A drain may spend this many requests per node beyond one eviction per pod.
const REQUESTS_OVER_PODS: f64 = 5.0;
/// Between the backends, a figure differing by more than this share is explained.
const BACKEND_GAP: f64 = 0.15;

/// The figures of one run of rotor and the kubectl loop on one backend at one concurrency.
struct Row {
    backend: Backend,
    c: usize,
    rotor: Option<f64>,
    kubectl: Option<f64>,
    bound: f64,
    rotor_violations: Option<usize>,
    kubectl_violations: Option<usize>,
    rotor_requests: Option<f64>,
    kubectl_requests: Option<f64>,
    evictable: f64,
}

#[derive(Default)]
pub struct Table {
    rows: Vec<Row>,
}

pub(crate) fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn cell(m: Option<f64>, runs: &[Option<f64>], unit: &str) -> String {
    match m {
        None => "n/a".into(),
        Some(m) => {
            let each: Vec<String> = runs
                .iter()
                .map(|r| r.map_or("unfinished".into(), |r| format!("{r:.1}")))
                .collect();
            if each.len() > 1 {
                format!("{m:.1}{unit} ({})", each.join(", "))
            } else {
                format!("{m:.1}{unit}")
            }
        }
    }
}

/// PASS, or MISS with the ratio and target.
fn verdict(value: Option<f64>, target: f64) -> &'static str {
    match value {
        Some(v) if v <= target => "PASS",
        _ => "MISS",
    }
}

/// One group's medians.
struct Medians {
    rotor: Option<f64>,
    kubectl: Option<f64>,
    bound: Option<f64>,
    vs_kubectl: Option<f64>,
    vs_bound: Option<f64>,
    rotor_requests: Option<f64>,
    kubectl_requests: Option<f64>,
    rotor_violations: usize,
    kubectl_violations: usize,
    evictable: f64,
}

impl Table {
    pub fn add(
        &mut self,
        backend: Backend,
        c: usize,
        rotor: Option<RunResult>,
        kubectl: Option<RunResult>,
    ) {
        let bound = rotor
            .as_ref()
            .or(kubectl.as_ref())
            .map_or(0.0, |r| r.bound.total(c));
        let evictable = rotor
            .as_ref()
            .or(kubectl.as_ref())
            .map_or(0.0, |r| r.evictable_per_node);
        self.rows.push(Row {
            backend,
            c,
            rotor: rotor.as_ref().and_then(|r| r.makespan),
            kubectl: kubectl.as_ref().and_then(|r| r.makespan),
            bound,
            rotor_violations: rotor.as_ref().map(|r| r.violations),
            kubectl_violations: kubectl.as_ref().map(|r| r.violations),
            rotor_requests: rotor.as_ref().map(RunResult::requests_per_node),
            kubectl_requests: kubectl.as_ref().map(RunResult::requests_per_node),
            evictable,
        });
    }

    fn group(&self, backend: Backend, c: usize) -> Vec<&Row> {
        self.rows
            .iter()
            .filter(|r| r.backend == backend && r.c == c)
            .collect()
    }

    fn medians(rows: &[&Row]) -> Medians {
        let pick =
            |f: &dyn Fn(&Row) -> Option<f64>| median(rows.iter().filter_map(|r| f(r)).collect());
        Medians {
            rotor: pick(&|r| r.rotor),
            kubectl: pick(&|r| r.kubectl),
            bound: pick(&|r| Some(r.bound)),
            vs_kubectl: pick(&|r| Some(r.rotor? / r.kubectl?)),
            vs_bound: pick(&|r| Some(r.rotor? / r.bound)),
            rotor_requests: pick(&|r| r.rotor_requests),
            kubectl_requests: pick(&|r| r.kubectl_requests),
            rotor_violations: rows.iter().filter_map(|r| r.rotor_violations).sum(),
            kubectl_violations: rows.iter().filter_map(|r| r.kubectl_violations).sum(),
            evictable: pick(&|r| Some(r.evictable)).unwrap_or(0.0),
        }
    }

    pub fn print(&self, args: &Args, summary: &mut Vec<String>) {
        println!();
        println!(
            "== figures: the median of {} run(s), each run's figure in brackets ==",
            args.runs
        );
        println!(
            "| backend | C | rotor-drainer | kubectl loop | rotor / kubectl | lower bound | rotor / bound | violations rotor, kubectl | requests per node rotor, kubectl (pods per node) |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        let mut groups: Vec<(Backend, usize)> = Vec::new();
        for r in &self.rows {
            if !groups.contains(&(r.backend, r.c)) {
                groups.push((r.backend, r.c));
            }
        }
        for &(backend, c) in &groups {
            let rows = self.group(backend, c);
            let m = Self::medians(&rows);
            let runs =
                |f: &dyn Fn(&Row) -> Option<f64>| rows.iter().map(|r| f(r)).collect::<Vec<_>>();
            println!(
                "| {} | {c} | {} | {} | {} | {} | {} | {}, {} | {}, {} ({:.0}) |",
                backend.name(),
                cell(m.rotor, &runs(&|r| r.rotor), " s"),
                cell(m.kubectl, &runs(&|r| r.kubectl), " s"),
                m.vs_kubectl.map_or("n/a".into(), |v| format!("{v:.2}")),
                m.bound.map_or("n/a".into(), |v| format!("{v:.1} s")),
                m.vs_bound.map_or("n/a".into(), |v| format!("{v:.2}")),
                m.rotor_violations,
                m.kubectl_violations,
                m.rotor_requests.map_or("n/a".into(), |v| format!("{v:.1}")),
                m.kubectl_requests
                    .map_or("n/a".into(), |v| format!("{v:.1}")),
                m.evictable,
            );
            let mut line = |s: String| {
                println!("{s}");
                summary.push(s);
            };
            let name = backend.name();
            if args.rotor {
                match backend {
                    Backend::Sim if c == 3 => line(format!(
                        "{name} C={c}: rotor / lower bound {}  (target <= {SIM_VS_BOUND_AT_3:.2})  {}",
                        fmt(m.vs_bound),
                        verdict(m.vs_bound, SIM_VS_BOUND_AT_3)
                    )),
                    Backend::Real => line(format!(
                        "{name} C={c}: rotor / lower bound {}  (target <= {REAL_VS_BOUND:.2})  {}",
                        fmt(m.vs_bound),
                        verdict(m.vs_bound, REAL_VS_BOUND)
                    )),
                    Backend::Sim => {}
                }
                if backend == Backend::Real && args.kubectl {
                    line(format!(
                        "{name} C={c}: rotor / kubectl loop {}  (target <= {REAL_VS_KUBECTL:.2})  {}",
                        fmt(m.vs_kubectl),
                        verdict(m.vs_kubectl, REAL_VS_KUBECTL)
                    ));
                }
                let cap = m.evictable + REQUESTS_OVER_PODS;
                line(format!(
                    "{name} C={c}: rotor requests per node {}  (target <= pods per node + 5 = {cap:.1})  {}",
                    fmt(m.rotor_requests),
                    verdict(m.rotor_requests, cap)
                ));
                line(format!(
                    "{name} C={c}: rotor budget violations {}  (target 0)  {}",
                    m.rotor_violations,
                    if m.rotor_violations == 0 {
                        "PASS"
                    } else {
                        "MISS"
                    }
                ));
            }
        }
        self.print_backends(args);
    }

    /// rotor-sim beside the real control plane, where both ran.
    fn print_backends(&self, args: &Args) {
        if !(args.backends.contains(&Backend::Sim) && args.backends.contains(&Backend::Real)) {
            return;
        }
        println!();
        println!(
            "== rotor-sim against the real control plane (medians; * differs by more than 15 %) =="
        );
        println!("| C | figure | rotor-sim | real | real / sim |");
        println!("|---|---|---|---|---|");
        for &c in &args.concurrency {
            let sim = Self::medians(&self.group(Backend::Sim, c));
            let real = Self::medians(&self.group(Backend::Real, c));
            let figures = [
                ("rotor makespan (s)", sim.rotor, real.rotor),
                ("kubectl loop makespan (s)", sim.kubectl, real.kubectl),
                ("lower bound (s)", sim.bound, real.bound),
                ("rotor / lower bound", sim.vs_bound, real.vs_bound),
                ("rotor / kubectl loop", sim.vs_kubectl, real.vs_kubectl),
                (
                    "rotor requests per node",
                    sim.rotor_requests,
                    real.rotor_requests,
                ),
                (
                    "kubectl requests per node",
                    sim.kubectl_requests,
                    real.kubectl_requests,
                ),
            ];
            for (what, s, r) in figures {
                let ratio = match (s, r) {
                    (Some(s), Some(r)) if s > 0.0 => {
                        let q = r / s;
                        let mark = if (q - 1.0).abs() > BACKEND_GAP {
                            " *"
                        } else {
                            ""
                        };
                        format!("{q:.2}{mark}")
                    }
                    _ => "n/a".into(),
                };
                println!("| {c} | {what} | {} | {} | {ratio} |", fmt(s), fmt(r));
            }
        }
    }
}

fn fmt(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.2}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_takes_the_middle_run_or_the_mean_of_the_two_middle_ones() {
        assert_eq!(median(vec![54.7, 53.6, 55.0]), Some(54.7));
        assert_eq!(median(vec![2.0, 1.0]), Some(1.5));
        assert_eq!(median(Vec::new()), None);
    }

    #[test]
    fn a_missing_figure_is_a_miss() {
        assert_eq!(verdict(Some(1.2), 1.25), "PASS");
        assert_eq!(verdict(Some(1.3), 1.25), "MISS");
        assert_eq!(verdict(None, 1.25), "MISS");
    }
}
