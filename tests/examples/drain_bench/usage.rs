//! What a run costs the processes it touches: CPU seconds and resident memory of the contestant
//! (rotor-drainer; the kubectl loop's processes are too short-lived to sample) and of the
//! servers answering it (kube-apiserver and etcd on the real control plane, rotor-sim on the
//! simulator), read from `/proc` from just before t=0 until the last node is drained.

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

/// Samples a set of processes in a thread until [`UsageSampler::finish`].
pub struct UsageSampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Usage>>,
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
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(SAMPLE_EVERY);
                for ((_, pid), peak) in processes.iter().zip(&mut peaks) {
                    *peak = peak.max(rss_mib(*pid));
                }
            }
            processes
                .iter()
                .zip(start)
                .zip(peaks)
                .map(|(((name, pid), (cpu_start, rss_start)), peak)| Usage {
                    name: name.clone(),
                    cpu_seconds: (cpu_seconds(*pid).unwrap_or(cpu_start) - cpu_start).max(0.0),
                    rss_start_mib: rss_start,
                    rss_peak_mib: peak,
                })
                .collect()
        });
        UsageSampler { stop, thread }
    }

    /// Stops sampling and returns each process's figures, in the order given.
    pub fn finish(self) -> Vec<Usage> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
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
        let usage = sampler.finish();
        assert_eq!(usage.len(), 1);
        assert!(usage[0].rss_start_mib > 0.0 && usage[0].rss_peak_mib >= usage[0].rss_start_mib);
        assert!(usage[0].cpu_seconds > 0.1, "{:?}", usage[0]);
    }
}
