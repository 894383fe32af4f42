//! DeleteOptions as a delete or an eviction carries them: the preconditions the object must still
//! meet and the grace period its removal gets.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::ApiError;

/// Preconditions and grace period from a DeleteOptions body and query.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub grace_period_seconds: Option<i64>,
}

impl DeleteOptions {
    /// Whether the options ask for a dry run, which the simulator does not perform.
    pub fn dry_run(v: &Value) -> bool {
        v["dryRun"].as_array().is_some_and(|a| !a.is_empty())
    }

    pub fn from_value(v: &Value) -> Self {
        let pre = &v["preconditions"];
        DeleteOptions {
            uid: pre["uid"].as_str().map(str::to_string),
            resource_version: pre["resourceVersion"].as_str().map(str::to_string),
            grace_period_seconds: v["gracePeriodSeconds"].as_i64(),
        }
    }

    /// Checks the preconditions against an object; the error names what differed.
    pub fn check(&self, meta: &ObjectMeta, group: &str, plural: &str) -> Result<(), ApiError> {
        let name = meta.name.as_deref().unwrap_or("");
        if let Some(uid) = &self.uid
            && meta.uid.as_deref() != Some(uid)
        {
            return Err(ApiError::precondition_failed(
                group,
                plural,
                name,
                // As kube-apiserver's delete and eviction handlers word it.
                format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                    meta.uid.as_deref().unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &self.resource_version
            && meta.resource_version.as_deref() != Some(rv)
        {
            return Err(ApiError::precondition_failed(
                group,
                plural,
                name,
                format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                    meta.resource_version.as_deref().unwrap_or("")
                ),
            ));
        }
        Ok(())
    }
}
