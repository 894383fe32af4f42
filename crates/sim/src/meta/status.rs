//! API errors as the apiserver reports them: a `metav1.Status` body with the HTTP code, reason,
//! message, and details (causes, retryAfterSeconds) clients branch on; and the Status of a
//! success. The cluster model answers with these; the API layer puts them on the wire.

use serde_json::{Value, json};

#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
    pub retry_after: Option<u32>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let resource = qualified(group, plural);
        Self::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
            .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        let resource = qualified(group, plural);
        Self::new(
            409,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// A stale resourceVersion on update or patch.
    pub fn conflict(group: &str, plural: &str, name: &str) -> Self {
        let resource = qualified(group, plural);
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// A failed UID or resourceVersion precondition on delete or eviction.
    pub fn precondition_failed(group: &str, plural: &str, name: &str, what: String) -> Self {
        let resource = qualified(group, plural);
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {resource} \"{name}\": {what}"),
        )
        .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn invalid(kind: &str, name: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {message}"),
        )
        .with_details(json!({"name": name, "kind": kind, "causes": [{"message": message}]}))
    }

    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::unsupported_media(
            "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json",
            content_type,
        )
    }

    /// A strategic merge patch to a custom resource, which has no patch strategy to follow.
    pub fn strategic_merge_of_custom_resource() -> Self {
        Self::unsupported_media(
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            "application/strategic-merge-patch+json",
        )
    }

    fn unsupported_media(accepted: &str, content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted} (got {content_type:?})"
            ),
        )
    }

    pub fn expired(requested: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    pub fn too_many_requests(message: impl Into<String>) -> Self {
        Self::new(429, "TooManyRequests", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    pub fn with_retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        let mut details = self.details.take().unwrap_or_else(|| json!({}));
        details["retryAfterSeconds"] = json!(seconds);
        self.details = Some(details);
        self
    }

    pub fn with_causes(mut self, causes: Value) -> Self {
        let mut details = self.details.take().unwrap_or_else(|| json!({}));
        details["causes"] = causes;
        self.details = Some(details);
        self
    }

    pub fn status_json(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        // A Status built without a reason (eviction's multiple-budget answer) carries none.
        if self.reason.is_empty()
            && let Some(o) = v.as_object_mut()
        {
            o.remove("reason");
        }
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

/// The body of a successful eviction or a deletion answered with a Status.
pub fn success_status(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_goes_in_details() {
        let e = ApiError::too_many_requests("busy").with_retry_after(10);
        assert_eq!(e.retry_after, Some(10));
        assert_eq!(e.status_json()["details"]["retryAfterSeconds"], 10);
    }

    #[test]
    fn not_found_names_group_qualified_resource() {
        let e = ApiError::not_found("apps", "deployments", "web");
        assert_eq!(e.message, "deployments.apps \"web\" not found");
        let e = ApiError::not_found("", "pods", "p");
        assert_eq!(e.message, "pods \"p\" not found");
        assert_eq!(e.status_json()["details"]["kind"], "pods");
    }
}
