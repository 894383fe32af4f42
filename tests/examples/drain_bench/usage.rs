//! What a run costs the processes it touches: CPU seconds and resident memory of the contestant
//! (rotor-drainer; the kubectl loop's processes are too short-lived to sample) and of the
//! servers answering it (the real control plane's components and kwok, or rotor-sim), read from
//! `/proc` from just before t=0 until the last node is drained; and how busy the machine's cores
//! were meanwhile (`/proc/stat`), since every process of a run shares them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use rotor_e2e::resident_memory;

/// How often resident memory is sampled (the peak between samples is VmHWM's, read at the end).
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Linux reports `/proc/<pid>/stat` times in USER_HZ ticks, 100 a second on every architecture
/// it exports to user space.
const USER_HZ: f64 = 100.0;

/// One process over the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Usage {
    pub name: String,
    /// User and system CPU seconds spent during the run.
    pub cpu_seconds: f64,
    /// Resident at the start (t=0).
    pub rss_start_mib: f64,
    /// The largest resident size sampled during the run.
    pub rss_peak_mib: f64,
}

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {:.1} CPU s, RSS {:.0} MiB at t=0, peak {:.0} MiB",
            self.name, self.cpu_seconds, self.rss_start_mib, self.rss_peak_mib
        )
    }
}

/// The whole machine over the run: its cores' busy time, and how much of the run they were
/// (nearly) all busy, when everything waiting for a core waits longer.
#[derive(Clone, Debug, PartialEq)]
pub struct MachineLoad {
    pub cores: usize,
    /// CPU seconds the cores were busy (not idle nor waiting for I/O).
    pub busy_seconds: f64,
    /// CPU seconds the cores had (run time times cores).
    pub total_seconds: f64,
    /// The share of samples in which the cores were at least [`SATURATED`] busy.
    pub saturated_share: f64,
}

/// The busy share of the cores from which a sample counts as saturated.
const SATURATED: f64 = 0.9;

impl std::fmt::Display for MachineLoad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "machine: {} cores busy {:.1} of {:.1} CPU s ({:.0}%), at {:.0}% or more in {:.0}% of the run",
            self.cores,
            self.busy_seconds,
            self.total_seconds,
            100.0 * self.busy_seconds / self.total_seconds.max(f64::EPSILON),
            100.0 * SATURATED,
            100.0 * self.saturated_share
        )
    }
}

/// Samples a set of processes in a thread until [`UsageSampler::finish`].
pub struct UsageSampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(Vec<Usage>, Option<MachineLoad>)>,
}

impl UsageSampler {
    /// Starts sampling `processes` (name, pid) now.
    pub fn start(processes: Vec<(String, u32)>) -> UsageSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let start: Vec<(f64, f64)> = processes
                .iter()
                .map(|(_, pid)| (cpu_seconds(*pid).unwrap_or(0.0), rss_mib(*pid)))
                .collect();
            let mut peaks: Vec<f64> = start.iter().map(|(_, rss)| *rss).collect();
            let first = machine_times();
            let (mut last, mut samples, mut saturated) = (first, 0u32, 0u32);
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(SAMPLE_EVERY);
                for ((_, pid), peak) in processes.iter().zip(&mut peaks) {
                    *peak = peak.max(rss_mib(*pid));
                }
                let now = machine_times();
                if let (Some(before), Some(after)) = (last, now) {
                    samples += 1;
                    if after.busy_share_since(&before) >= SATURATED {
                        saturated += 1;
                    }
                }
                last = now;
            }
            let load = match (first, machine_times()) {
                (Some(first), Some(end)) => Some(MachineLoad {
                    cores: end.cores,
                    busy_seconds: (end.busy - first.busy) / USER_HZ,
                    total_seconds: (end.total - first.total) / USER_HZ,
                    saturated_share: f64::from(saturated) / f64::from(samples.max(1)),
                }),
                _ => None,
            };
            let usage = processes
                .iter()
                .zip(start)
                .zip(peaks)
                .map(|(((name, pid), (cpu_start, rss_start)), peak)| Usage {
                    name: name.clone(),
                    cpu_seconds: (cpu_seconds(*pid).unwrap_or(cpu_start) - cpu_start).max(0.0),
                    rss_start_mib: rss_start,
                    rss_peak_mib: peak,
                })
                .collect();
            (usage, load)
        });
        UsageSampler { stop, thread }
    }

    /// Stops sampling and returns each process's figures, in the order given, and the
    /// machine's load (none where `/proc/stat` cannot be read).
    pub fn finish(self) -> (Vec<Usage>, Option<MachineLoad>) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// The machine's CPU time so far, in USER_HZ ticks summed over its cores.
#[derive(Clone, Copy, Debug, PartialEq)]
struct MachineTimes {
    cores: usize,
    busy: f64,
    total: f64,
}

impl MachineTimes {
    /// The share of the cores' time between `before` and `self` that was busy.
    fn busy_share_since(&self, before: &MachineTimes) -> f64 {
        let total = self.total - before.total;
        if total <= 0.0 {
            return 0.0;
        }
        (self.busy - before.busy) / total
    }
}

fn machine_times() -> Option<MachineTimes> {
    machine_times_of(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// Reads the `cpu` line of `/proc/stat` (user nice system idle iowait irq softirq steal ...,
/// in ticks over every core): busy is all but idle and iowait; guest time is already counted
/// in user and nice, so only the first eight fields are summed. Cores are the `cpuN` lines.
fn machine_times_of(stat: &str) -> Option<MachineTimes> {
    let mut lines = stat.lines();
    let fields: Vec<f64> = lines
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    if fields.len() < 5 {
        return None;
    }
    let total: f64 = fields.iter().sum();
    let cores = lines
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    Some(MachineTimes {
        cores,
        busy: total - fields[3] - fields[4],
        total,
    })
}

/// Process `pid`'s resident memory now, in MiB (0 once it is gone).
pub fn rss_mib(pid: u32) -> f64 {
    resident_memory(pid).map_or(0.0, |m| m.current_kib as f64 / 1024.0)
}

/// User plus system CPU seconds process `pid` has used so far.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    cpu_seconds_of(&stat)
}

/// Reads utime and stime (fields 14 and 15) from a `/proc/<pid>/stat` line. The command name
/// (field 2) is in parentheses and may hold spaces, so fields are counted after its `)`.
fn cpu_seconds_of(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are the 12th and 13th.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_are_read_past_a_command_name_with_spaces_and_parentheses() {
        // A line as Linux writes it (fields 1-17), the name holding ") (" to trip a naive split.
        let stat = "4242 (kube (api) server) S 1 4242 4242 0 -1 4194560 9811 0 3 0 1234 567 0 0 20";
        assert_eq!(cpu_seconds_of(stat), Some(18.01));
        assert_eq!(cpu_seconds_of("4242 (etcd) S 1"), None);
    }

    #[test]
    fn the_machine_load_counts_all_but_idle_and_iowait_over_the_cores() {
        // user nice system idle iowait irq softirq steal guest guest_nice, then two cores.
        let before = "cpu  100 0 50 800 50 0 0 0 30 0\ncpu0 50 0 25 400 25 0 0 0 15 0\ncpu1 50 0 25 400 25 0 0 0 15 0\nintr 1 2 3\n";
        let after = "cpu  250 0 80 850 60 5 5 0 90 0\ncpu0 125 0 40 425 30 2 3 0 45 0\ncpu1 125 0 40 425 30 3 2 0 45 0\nintr 1 2 3\n";
        let (before, after) = (
            machine_times_of(before).unwrap(),
            machine_times_of(after).unwrap(),
        );
        assert_eq!(before.cores, 2);
        // Busy: (150 + 30 + 10) of (150 + 30 + 50 + 10 + 10) ticks; guest time is not counted
        // twice.
        assert_eq!(after.busy - before.busy, 190.0);
        assert_eq!(after.total - before.total, 250.0);
        assert_eq!(after.busy_share_since(&before), 0.76);
        assert_eq!(machine_times_of("intr 1 2 3\n"), None);
    }

    #[test]
    fn the_sampler_reads_this_process() {
        let me = std::process::id();
        let sampler = UsageSampler::start(vec![("self".into(), me)]);
        // Spend some CPU so that the figure can move.
        let mut x = 0u64;
        let until = std::time::Instant::now() + Duration::from_millis(300);
        while std::time::Instant::now() < until {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let (usage, load) = sampler.finish();
        let load = load.expect("/proc/stat is readable");
        assert!(load.cores >= 1 && load.total_seconds > 0.0, "{load:?}");
        assert!(load.busy_seconds > 0.1, "{load:?}");
        assert_eq!(usage.len(), 1);
        assert!(usage[0].rss_start_mib > 0.0 && usage[0].rss_peak_mib >= usage[0].rss_start_mib);
        assert!(usage[0].cpu_seconds > 0.1, "{:?}", usage[0]);
    }
}
