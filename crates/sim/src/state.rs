//! The simulator's shared state: the cluster behind one lock, the injected faults, and the
//! signal that cuts open watches. The API, the admin API and the authorizer read it; the server
//! ([`crate::server`]) runs it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::cluster::Cluster;
use crate::meta::ApiError;

/// One injected error: requests matching verb and resource fail with `code` at `rate`.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorRule {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`; absent matches all.
    #[serde(default)]
    pub verb: Option<String>,
    /// e.g. `pods`, `pods/eviction`, `nodes`; absent matches all.
    #[serde(default)]
    pub resource: Option<String>,
    /// Fraction of matching requests to fail, 0 to 1.
    pub rate: f64,
    /// HTTP status to answer: 404 (the resource type not served: an API server whose CRDs are
    /// not synced yet), 429, 500, 503 or 504.
    #[serde(default = "default_code")]
    pub code: u16,
    /// Serve the request, then answer the error instead of its result: an answer lost on its
    /// way back, the write made all the same (a 504 from a busy API server).
    #[serde(default)]
    pub after_serving: bool,
    /// Fire at most this many times, then the rule is gone; absent, for as long as it stands.
    #[serde(default)]
    pub times: Option<u32>,
}

/// One injected delay: requests matching verb and resource wait `ms` before they are served
/// (a watch: before its stream begins; the events of an open one are not delayed).
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DelayRule {
    /// As [`ErrorRule::verb`]; absent matches all.
    #[serde(default)]
    pub verb: Option<String>,
    /// As [`ErrorRule::resource`]; absent matches all.
    #[serde(default)]
    pub resource: Option<String>,
    pub ms: u64,
}

/// An error a rule fired: answered instead of the request's result, before or after serving it.
pub struct Injected {
    pub error: ApiError,
    pub after_serving: bool,
}

/// Whether a rule's verb and resource (each absent: any) match a request's.
fn matches(
    rule_verb: &Option<String>,
    rule_resource: &Option<String>,
    verb: &str,
    resource: &str,
) -> bool {
    rule_verb.as_deref().is_none_or(|v| v == verb)
        && rule_resource.as_deref().is_none_or(|x| x == resource)
}

fn default_code() -> u16 {
    500
}

#[derive(Default)]
pub struct Faults {
    pub rules: Vec<ErrorRule>,
    pub latency: Duration,
    pub delays: Vec<DelayRule>,
    rng: u64,
}

impl Faults {
    /// How long a request waits for the first delay rule it matches (none: no wait).
    pub fn delay(&self, verb: &str, resource: &str) -> Duration {
        self.delays
            .iter()
            .find(|r| matches(&r.verb, &r.resource, verb, resource))
            .map_or(Duration::ZERO, |r| Duration::from_millis(r.ms))
    }

    fn next_f64(&mut self) -> f64 {
        // xorshift64*: enough randomness for fault injection, no dependency.
        if self.rng == 0 {
            self.rng = 0x9e3779b97f4a7c15 ^ std::process::id() as u64;
        }
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545f4914f6cdd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The error to answer instead of serving this request, if a rule fires.
    #[cfg(test)]
    pub fn injected_error(&mut self, verb: &str, resource: &str) -> Option<ApiError> {
        self.injected(verb, resource).map(|i| i.error)
    }

    /// The error to answer for this request, and whether after serving it, if a rule fires; a
    /// rule with `times` left counts one down, and goes at zero.
    pub fn injected(&mut self, verb: &str, resource: &str) -> Option<Injected> {
        // Fired as often as it was told, or told never to.
        self.rules.retain(|r| r.times != Some(0));
        // Each matching rule draws in turn, so a rule that does not fire leaves the request to
        // the next one: two rules of rates 0.3 and 0.1 fail 0.3 and 0.07 of the requests.
        let mut fired = None;
        for index in 0..self.rules.len() {
            let rule = &self.rules[index];
            if matches(&rule.verb, &rule.resource, verb, resource) {
                let rate = rule.rate;
                if self.next_f64() < rate {
                    fired = Some(index);
                    break;
                }
            }
        }
        let index = fired?;
        let rule = self.rules[index].clone();
        if let Some(times) = rule.times {
            if times <= 1 {
                self.rules.remove(index);
            } else {
                self.rules[index].times = Some(times - 1);
            }
        }
        let msg = format!("injected fault: {verb} {resource}");
        let error = match rule.code {
            404 => ApiError {
                code: 404,
                reason: "NotFound",
                message: format!("the server could not find the requested resource ({msg})"),
                details: None,
                retry_after: None,
            },
            429 => ApiError::too_many_requests(msg).with_retry_after(1),
            503 => ApiError {
                code: 503,
                reason: "ServiceUnavailable",
                message: msg,
                details: None,
                retry_after: None,
            },
            504 => ApiError {
                code: 504,
                reason: "Timeout",
                message: msg,
                details: None,
                retry_after: None,
            },
            _ => ApiError::internal(msg),
        };
        Some(Injected {
            error,
            after_serving: rule.after_serving,
        })
    }
}

pub struct Sim {
    pub cluster: Mutex<Cluster>,
    pub faults: Mutex<Faults>,
    /// Counts the drops of every watch; each watch stream subscribes as it opens.
    pub drop_tx: watch::Sender<u64>,
    pub bookmark_interval: Duration,
    /// The RBAC policy in force; `None` (the default) serves every request.
    pub authz: Option<Arc<crate::authz::Authz>>,
}

impl Sim {
    pub fn new(cluster: Cluster) -> Arc<Sim> {
        Sim::with_authz(cluster, None)
    }

    pub fn with_authz(cluster: Cluster, authz: Option<Arc<crate::authz::Authz>>) -> Arc<Sim> {
        let drop_tx = watch::Sender::new(0);
        let bookmark_interval = cluster.timing.bookmark_interval;
        Arc::new(Sim {
            cluster: Mutex::new(cluster),
            faults: Mutex::new(Faults::default()),
            drop_tx,
            bookmark_interval,
            authz,
        })
    }

    /// Cuts every open watch stream (clients see the connection end and must re-watch).
    pub fn drop_watches(&self) {
        self.drop_tx.send_modify(|g| *g += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_rules_match_verb_and_resource() {
        let mut f = Faults {
            rules: vec![ErrorRule {
                verb: Some("create".into()),
                resource: Some("pods/eviction".into()),
                rate: 1.0,
                code: 429,
                after_serving: false,
                times: None,
            }],
            ..Default::default()
        };
        let e = f.injected_error("create", "pods/eviction").unwrap();
        assert_eq!((e.code, e.retry_after), (429, Some(1)));
        assert!(f.injected_error("list", "pods").is_none());
        f.rules[0].rate = 0.0;
        assert!(f.injected_error("create", "pods/eviction").is_none());
    }

    #[test]
    fn a_matching_rule_that_does_not_fire_leaves_the_request_to_the_next() {
        let rule = |rate: f64, code: u16, times: Option<u32>| ErrorRule {
            verb: Some("create".into()),
            resource: Some("pods/eviction".into()),
            rate,
            code,
            after_serving: false,
            times,
        };
        let mut f = Faults {
            rules: vec![rule(0.0, 429, None), rule(1.0, 503, None)],
            ..Default::default()
        };
        assert_eq!(
            f.injected_error("create", "pods/eviction").unwrap().code,
            503
        );
        // A rule used up goes, and the next one answers.
        f.rules = vec![rule(1.0, 429, Some(1)), rule(1.0, 503, None)];
        assert_eq!(
            f.injected_error("create", "pods/eviction").unwrap().code,
            429
        );
        assert_eq!(
            f.injected_error("create", "pods/eviction").unwrap().code,
            503
        );
        assert_eq!(f.rules.len(), 1);
    }

    #[test]
    fn delay_rules_match_verb_and_resource() {
        let f = Faults {
            delays: vec![
                DelayRule {
                    verb: Some("watch".into()),
                    resource: Some("pods".into()),
                    ms: 30_000,
                },
                DelayRule {
                    verb: None,
                    resource: Some("pods".into()),
                    ms: 5,
                },
            ],
            ..Default::default()
        };
        assert_eq!(f.delay("watch", "pods"), Duration::from_secs(30));
        assert_eq!(f.delay("list", "pods"), Duration::from_millis(5));
        assert_eq!(f.delay("watch", "nodes"), Duration::ZERO);
    }

    fn first_rule() -> ErrorRule {
        ErrorRule {
            verb: Some("patch".into()),
            resource: Some("nodes".into()),
            rate: 1.0,
            code: 504,
            after_serving: true,
            times: Some(2),
        }
    }

    #[test]
    fn a_rule_with_times_fires_that_often_then_goes() {
        let mut f = Faults {
            rules: vec![first_rule()],
            ..Default::default()
        };
        let first = f.injected("patch", "nodes").unwrap();
        assert_eq!((first.error.code, first.after_serving), (504, true));
        assert!(f.injected("patch", "nodes").is_some());
        assert!(f.injected("patch", "nodes").is_none());
        assert!(f.rules.is_empty());
        // Told to fire no time: it never does.
        f.rules = vec![ErrorRule {
            times: Some(0),
            ..first_rule()
        }];
        assert!(f.injected("patch", "nodes").is_none());
    }

    #[test]
    fn fault_rate_is_roughly_honoured() {
        let mut f = Faults {
            rules: vec![ErrorRule {
                verb: None,
                resource: None,
                rate: 0.3,
                code: 500,
                after_serving: false,
                times: None,
            }],
            ..Default::default()
        };
        let hits = (0..10_000)
            .filter(|_| f.injected_error("get", "pods").is_some())
            .count();
        assert!((2_500..3_500).contains(&hits), "{hits}");
    }
}
