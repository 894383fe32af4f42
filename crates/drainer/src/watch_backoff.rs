//! The back-off every watch of the drainer retries with. kube's `default_backoff` grows from
//! 0.8 s to 30 s, but starts over at every item the stream yields, and a list-then-watch yields
//! its `Init` item before its list request: a list that keeps failing (a CRD not installed, RBAC
//! refusing, an API server shedding load) was retried about once a second, for ever. Here only
//! time starts it over: the same curve, from 0.8 s again once 120 s have passed without a
//! failure.

use futures::TryStream;
use kube::runtime::utils::{Backoff, StreamBackoff};
use kube::runtime::watcher::DefaultBackoff;

/// kube's default watcher back-off, reset by time only (not by the stream's items).
#[derive(Default)]
pub struct WatchBackoff(DefaultBackoff);

impl Iterator for WatchBackoff {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next()
    }
}

impl Backoff for WatchBackoff {
    /// Items do not reset it: a failing list yields `Init` before each attempt.
    fn reset(&mut self) {}
}

/// `.watch_backoff()` on a watch stream: retried after an error with [`WatchBackoff`].
pub trait WatchBackoffExt: TryStream + Sized {
    fn watch_backoff(self) -> StreamBackoff<Self, WatchBackoff> {
        StreamBackoff::new(self, WatchBackoff::default())
    }
}

impl<S: TryStream> WatchBackoffExt for S {}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The delays before the retries of a list that fails `times` times, as `StreamBackoff`
    /// draws them: each attempt first yields `Init` (an item: `reset`), then the error (`next`).
    fn delays_of_a_failing_list(mut backoff: impl Backoff, times: usize) -> Vec<Duration> {
        (0..times)
            .map(|_| {
                backoff.reset();
                backoff.next().expect("kube's back-off never gives up")
            })
            .collect()
    }

    #[test]
    fn a_list_that_keeps_failing_is_retried_less_and_less_often() {
        let ours = delays_of_a_failing_list(WatchBackoff::default(), 8);
        let kube_default = delays_of_a_failing_list(DefaultBackoff::default(), 8);
        // kube's starts over at every Init: about 0.8 s each time (jitter adds up to as much).
        assert!(
            kube_default.iter().all(|d| *d < Duration::from_secs(2)),
            "{kube_default:?}"
        );
        // Ours doubles from 0.8 s to its 30 s ceiling.
        assert!(ours[0] < Duration::from_secs(2), "{ours:?}");
        assert!(ours[5] >= Duration::from_secs(20), "{ours:?}");
        assert!(ours[7] >= Duration::from_secs(30), "{ours:?}");
        let total: Duration = ours.iter().sum();
        assert!(total > Duration::from_secs(90), "{ours:?}");
    }
}
