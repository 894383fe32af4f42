//! What the API server answered an eviction or a forced deletion, sorted into an
//! [`EvictionOutcome`] by pure functions, so each status it can give is testable: 201, 429 with
//! or without Retry-After, 404/409 (the pod is gone), 403 and admission refusals (who refused and
//! what to do), 500 for a pod that several budgets cover.

use std::time::Duration;

use kube::core::Status;

/// What became of one eviction (or forced deletion) request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictionOutcome {
    /// Accepted: the pod is being deleted.
    Evicted,
    /// The pod is already gone, or was replaced by another with the same name (404, 409).
    Gone,
    /// 429 with the `DisruptionBudget` cause and no retry hint: the budget allows nothing now.
    BudgetRefused { message: String },
    /// 429 with a retry hint (a budget still being processed, or API priority and fairness).
    RetryLater { after: Duration, message: String },
    /// 500: the pod is covered by more than one budget; waiting will not help.
    MultipleBudgets { message: String },
    /// The API server refused the request itself, for a reason only people can change (see
    /// [`Denial`]). A 4xx other than 404, 409 and 429, from authorization or admission.
    Denied { by: Denial, message: String },
    /// Anything else: transport errors, 5xx, other 4xx.
    Failed { code: Option<u16>, message: String },
}

/// Who refused a request, read from the API server's answer: what the operator must change
/// differs, so an admission policy's refusal is never reported as missing RBAC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denial {
    /// RBAC (or another authorizer): the ServiceAccount may not make this request (403, "User
    /// ... cannot create resource ...").
    Authorization,
    /// The credentials were not accepted (401).
    Authentication,
    /// A validating or mutating admission webhook, by name (any 4xx the webhook chose, "admission
    /// webhook \"name\" denied the request").
    Webhook(String),
    /// A ValidatingAdmissionPolicy, by name (403 or 422 by the policy's reason,
    /// "ValidatingAdmissionPolicy 'name' ... denied request").
    Policy(String),
    /// Another 403 (an admission plugin built into the API server, for example).
    Forbidden,
}

impl Denial {
    /// Who refused the request in `message`, answered with `code`; `None` when it is not a
    /// refusal (the code is not 401 or 403 and no admission controller is named).
    pub fn of(code: u16, message: &str) -> Option<Denial> {
        if let Some(name) = quoted_after(message, "admission webhook \"", '"') {
            return Some(Denial::Webhook(name));
        }
        if let Some(name) = quoted_after(message, "ValidatingAdmissionPolicy '", '\'') {
            return Some(Denial::Policy(name));
        }
        match code {
            401 => Some(Denial::Authentication),
            403 if message.contains(" cannot ") && message.contains(" resource ") => {
                Some(Denial::Authorization)
            }
            403 => Some(Denial::Forbidden),
            _ => None,
        }
    }

    /// What the operator does about it.
    pub fn remedy(&self) -> String {
        match self {
            // The same answer comes for an eviction and for a forced deletion: the message
            // names the verb and resource refused.
            Denial::Authorization => "grant rotor-drainer's ServiceAccount the verb on the resource the message names: deploy/base/drainer-rbac.yaml grants create on pods/eviction, and delete on pods for --force-after and --enforce-replace-by".into(),
            Denial::Authentication => "the API server did not accept rotor-drainer's credentials: check its ServiceAccount token and the API server's authentication".into(),
            Denial::Webhook(name) => format!("rotor's RBAC is not at fault: admission webhook {name} refuses it; change the webhook's rules or ask its owner to let rotor-drainer's ServiceAccount evict this pod"),
            Denial::Policy(name) => format!("rotor's RBAC is not at fault: ValidatingAdmissionPolicy {name} refuses it; change the policy or its binding to let rotor-drainer's ServiceAccount evict this pod"),
            Denial::Forbidden => "an admission check of the API server refuses it; its message says which".into(),
        }
    }
}

/// The text between `prefix` and the next `close`, when `message` contains `prefix`.
fn quoted_after(message: &str, prefix: &str, close: char) -> Option<String> {
    let rest = &message[message.find(prefix)? + prefix.len()..];
    let name = &rest[..rest.find(close)?];
    (!name.is_empty()).then(|| name.to_string())
}

/// How long an eviction refused because the pod's namespace is being deleted waits before it
/// is tried again (by then the namespace controller has usually deleted the pod).
const NAMESPACE_TERMINATING_RETRY: Duration = Duration::from_secs(5);

/// Sorts an API error from an eviction or deletion into an outcome.
pub fn outcome_of_error(err: &kube::Error) -> EvictionOutcome {
    match err {
        kube::Error::Api(status) => outcome_of_status(status),
        other => EvictionOutcome::Failed {
            code: None,
            message: other.to_string(),
        },
    }
}

/// Whether a conflict's message is a failed UID precondition, in either wording the API server
/// has: its eviction and delete handlers' ("the UID in the precondition (...) does not match
/// the UID in record (...)"), and the storage layer's, in a race with another write
/// ("Precondition failed: UID in precondition: ...").
fn failed_uid_precondition(message: &str) -> bool {
    message.contains("UID in the precondition") || message.contains("UID in precondition")
}

pub fn outcome_of_status(s: &Status) -> EvictionOutcome {
    let budget_cause = s
        .details
        .as_ref()
        .and_then(|d| d.causes.iter().find(|c| c.reason == "DisruptionBudget"));
    let retry_after = s
        .details
        .as_ref()
        .map(|d| d.retry_after_seconds)
        .unwrap_or(0);
    let message = match budget_cause {
        Some(c) if !c.message.is_empty() => c.message.clone(),
        _ => s.message.clone(),
    };
    match s.code {
        404 => EvictionOutcome::Gone,
        // Only the UID precondition's conflict says the pod is gone (a pod of the same name
        // may stand there now). Others pass: the budget's status updated by another evictor
        // past the server's own retries, a pod changed under a resourceVersion precondition.
        409 if failed_uid_precondition(&s.message) => EvictionOutcome::Gone,
        409 => EvictionOutcome::RetryLater {
            after: Duration::from_secs(1),
            message: s.message.clone(),
        },
        // The namespace controller deletes the pods of a namespace being deleted: nobody has
        // anything to change, and the pod goes by itself.
        403 if s.message.contains("because it is being terminated") => {
            EvictionOutcome::RetryLater {
                after: NAMESPACE_TERMINATING_RETRY,
                message: s.message.clone(),
            }
        }
        429 if retry_after == 0 && budget_cause.is_some() => {
            EvictionOutcome::BudgetRefused { message }
        }
        429 => EvictionOutcome::RetryLater {
            after: Duration::from_secs(retry_after.max(1) as u64),
            message,
        },
        500 if s.message.contains("more than one PodDisruptionBudget") => {
            EvictionOutcome::MultipleBudgets {
                message: s.message.clone(),
            }
        }
        code => match Denial::of(code, &s.message).filter(|_| (400..500).contains(&code)) {
            Some(by) => EvictionOutcome::Denied {
                by,
                message: s.message.clone(),
            },
            None => EvictionOutcome::Failed {
                code: Some(code),
                message: format!("{} ({})", s.message, s.reason),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};

    fn status(
        code: u16,
        reason: &str,
        message: &str,
        causes: Vec<(&str, &str)>,
        retry: u32,
    ) -> Status {
        let mut s = Status::failure(message, reason);
        s.code = code;
        s.details = Some(StatusDetails {
            causes: causes
                .into_iter()
                .map(|(r, m)| StatusCause {
                    reason: r.into(),
                    message: m.into(),
                    field: String::new(),
                })
                .collect(),
            retry_after_seconds: retry,
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
        });
        s
    }

    const REFUSAL: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

    #[test]
    fn budget_refusal_without_retry_hint_is_a_budget_wait() {
        let s = status(
            429,
            "TooManyRequests",
            REFUSAL,
            vec![(
                "DisruptionBudget",
                "The disruption budget web needs 3 healthy pods and has 3 currently",
            )],
            0,
        );
        assert_eq!(
            outcome_of_status(&s),
            EvictionOutcome::BudgetRefused {
                message: "The disruption budget web needs 3 healthy pods and has 3 currently"
                    .into()
            }
        );
    }

    #[test]
    fn unprocessed_budget_and_other_429s_honour_retry_after() {
        let s = status(
            429,
            "TooManyRequests",
            REFUSAL,
            vec![(
                "DisruptionBudget",
                "The disruption budget web is still being processed by the server.",
            )],
            10,
        );
        assert!(
            matches!(outcome_of_status(&s), EvictionOutcome::RetryLater { after, .. } if after == Duration::from_secs(10))
        );
        let s = status(
            429,
            "TooManyRequests",
            "too many requests, please try again later",
            vec![],
            0,
        );
        assert!(
            matches!(outcome_of_status(&s), EvictionOutcome::RetryLater { after, .. } if after == Duration::from_secs(1))
        );
    }

    #[test]
    fn not_found_and_uid_conflicts_mean_gone() {
        assert_eq!(
            outcome_of_status(&status(404, "NotFound", "pods \"a\" not found", vec![], 0)),
            EvictionOutcome::Gone
        );
        assert_eq!(
            outcome_of_status(&status(
                409,
                "Conflict",
                "Operation cannot be fulfilled on pods \"web-0\": Precondition failed: UID in precondition: 5d1f, UID in object meta: 77ac",
                vec![],
                0
            )),
            EvictionOutcome::Gone
        );
        // As kube-apiserver's eviction and delete handlers word it (v1.36).
        assert_eq!(
            outcome_of_status(&status(
                409,
                "Conflict",
                "Operation cannot be fulfilled on Pod \"web-0\": the UID in the precondition (5d1f) does not match the UID in record (77ac). The object might have been deleted and then recreated",
                vec![],
                0
            )),
            EvictionOutcome::Gone
        );
    }

    #[test]
    fn other_conflicts_and_a_terminating_namespace_are_retried_not_taken_for_gone_or_refused() {
        // The budget's status written by another evictor past the server's own retries: the
        // pod is still there, and its eviction must be sent again.
        let budget_conflict = status(
            409,
            "Conflict",
            "Operation cannot be fulfilled on poddisruptionbudgets.policy \"web\": the object has been modified; please apply your changes to the latest version and try again",
            vec![],
            0,
        );
        assert!(
            matches!(outcome_of_status(&budget_conflict), EvictionOutcome::RetryLater { after, .. } if after == Duration::from_secs(1)),
            "{:?}",
            outcome_of_status(&budget_conflict)
        );
        let version_conflict = status(
            409,
            "Conflict",
            "Operation cannot be fulfilled on pods \"web-0\": Precondition failed: ResourceVersion in precondition: 41, ResourceVersion in object meta: 42",
            vec![],
            0,
        );
        assert!(matches!(
            outcome_of_status(&version_conflict),
            EvictionOutcome::RetryLater { .. }
        ));
        // No one has to act on a namespace being deleted: not a refusal.
        let terminating = status(
            403,
            "Forbidden",
            "pods \"web-1\" is forbidden: unable to create new content in namespace shop because it is being terminated",
            vec![],
            0,
        );
        assert!(
            matches!(outcome_of_status(&terminating), EvictionOutcome::RetryLater { after, .. } if after == NAMESPACE_TERMINATING_RETRY),
            "{:?}",
            outcome_of_status(&terminating)
        );
    }

    /// The API server's own wording of each refusal (RBAC's forbidden message, an admission
    /// webhook's denial, a ValidatingAdmissionPolicy's with its default reason Invalid).
    #[test]
    fn refusals_name_who_refused() {
        let webhook = || Some(Denial::Webhook("freeze.example.com".into()));
        let cases: [(u16, &str, &str, Option<Denial>); 7] = [
            (
                403,
                "Forbidden",
                r#"pods "web-1" is forbidden: User "system:serviceaccount:rotor-system:rotor-drainer" cannot create resource "pods/eviction" in API group "" in the namespace "shop""#,
                Some(Denial::Authorization),
            ),
            (
                403,
                "",
                r#"admission webhook "freeze.example.com" denied the request: change freeze until Monday"#,
                webhook(),
            ),
            // A webhook picks its own code (at least 400).
            (
                400,
                "",
                r#"admission webhook "freeze.example.com" denied the request without explanation"#,
                webhook(),
            ),
            (
                422,
                "Invalid",
                r#"pods "web-1" is forbidden: ValidatingAdmissionPolicy 'no-evictions' with binding 'no-evictions-shop' denied request: frozen"#,
                Some(Denial::Policy("no-evictions".into())),
            ),
            (
                401,
                "Unauthorized",
                "Unauthorized",
                Some(Denial::Authentication),
            ),
            // Not refusals: a malformed request, and a 5xx that quotes a webhook (it failed to
            // answer).
            (400, "BadRequest", "the body is not an Eviction", None),
            (
                500,
                "InternalError",
                r#"Internal error occurred: failed calling webhook "freeze.example.com": connection refused"#,
                None,
            ),
        ];
        for (code, reason, message, expected) in cases {
            let denial = match outcome_of_status(&status(code, reason, message, vec![], 0)) {
                EvictionOutcome::Denied { by, .. } => Some(by),
                _ => None,
            };
            assert_eq!(denial, expected, "{code} {message}");
        }
        // Names are cut at their closing quote, and an empty name is no name.
        assert_eq!(
            Denial::of(403, "admission webhook \"\" denied the request"),
            Some(Denial::Forbidden)
        );
        assert_eq!(Denial::of(418, "ValidatingAdmissionPolicy 'p"), None);
    }

    #[test]
    fn several_budgets_are_reported_not_retried() {
        let s = status(
            500,
            "",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            vec![],
            0,
        );
        assert!(matches!(
            outcome_of_status(&s),
            EvictionOutcome::MultipleBudgets { .. }
        ));
        let s = status(500, "InternalError", "etcd timeout", vec![], 0);
        assert!(matches!(
            outcome_of_status(&s),
            EvictionOutcome::Failed {
                code: Some(500),
                ..
            }
        ));
    }
}
