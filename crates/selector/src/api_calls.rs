//! The API calls one run made, counted by the code that makes them (not by a proxy), so a run can
//! report what it cost: logged at the end of every run and part of the JSON output under
//! `apiCalls`. Keys are `<verb> <resource>` as an API server would log them (`list nodes`,
//! `patch nodes`, `create events`, `get /version`), per API (`kubernetes`; the AWS provider adds
//! `aws`, the Google Cloud provider `gcp`).

use std::collections::BTreeMap;
use std::fmt;

/// Calls per API, then per `<verb> <resource>`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiCalls {
    counts: BTreeMap<&'static str, BTreeMap<String, u64>>,
}

/// The Kubernetes API, as a key of [`ApiCalls`].
pub const KUBERNETES: &str = "kubernetes";

/// Amazon Web Services, as a key of [`ApiCalls`]; calls are keyed by operation name
/// (`DescribeAutoScalingGroups`).
pub const AWS: &str = "aws";

/// Google Cloud, as a key of [`ApiCalls`]; calls are keyed by method
/// (`instanceGroupManagers.aggregatedList`).
pub const GCP: &str = "gcp";

impl ApiCalls {
    /// Counts one call to `api` (e.g. [`KUBERNETES`]) described as `call` (`list nodes`).
    pub fn count(&mut self, api: &'static str, call: &str) {
        *self
            .counts
            .entry(api)
            .or_default()
            .entry(call.to_owned())
            .or_default() += 1;
    }

    /// Counts one Kubernetes API call.
    pub fn kube(&mut self, call: &str) {
        self.count(KUBERNETES, call);
    }

    /// Counts one AWS call (by operation name; the SDK's own retries are not counted).
    pub fn aws(&mut self, operation: &str) {
        self.count(AWS, operation);
    }

    /// How many calls `call` to `api` were made.
    pub fn get(&self, api: &str, call: &str) -> u64 {
        self.counts
            .get(api)
            .and_then(|calls| calls.get(call))
            .copied()
            .unwrap_or(0)
    }

    /// Every call to `api`.
    pub fn total(&self, api: &str) -> u64 {
        self.counts.get(api).map_or(0, |calls| calls.values().sum())
    }

    /// `{"kubernetes": {"list nodes": 1, ...}}`; an API with no call is absent.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.counts).unwrap_or_default()
    }
}

impl fmt::Display for ApiCalls {
    /// `kubernetes: get /version=1 list nodes=1 patch nodes=2`, APIs separated by `; `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.counts.is_empty() {
            return f.write_str("no API calls");
        }
        for (i, (api, calls)) in self.counts.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{api}:")?;
            for (call, count) in calls {
                write!(f, " {call}={count}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn counts_by_api_and_call() {
        let mut calls = ApiCalls::default();
        assert_eq!(calls.to_string(), "no API calls");
        calls.kube("list nodes");
        calls.kube("patch nodes");
        calls.kube("patch nodes");
        calls.count("aws", "DescribeAutoScalingGroups");
        assert_eq!(calls.get(KUBERNETES, "patch nodes"), 2);
        assert_eq!(calls.get(KUBERNETES, "get nodes"), 0);
        assert_eq!(calls.total(KUBERNETES), 3);
        assert_eq!(
            calls.to_json(),
            json!({"aws": {"DescribeAutoScalingGroups": 1}, "kubernetes": {"list nodes": 1, "patch nodes": 2}})
        );
        assert_eq!(
            calls.to_string(),
            "aws: DescribeAutoScalingGroups=1; kubernetes: list nodes=1 patch nodes=2"
        );
    }
}
