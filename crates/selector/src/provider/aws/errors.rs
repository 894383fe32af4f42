//! How a failed AWS call is worded, and whether it fails the run or only the groups that use
//! the launch template it asked about.

use std::collections::BTreeMap;

use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::SdkError;
use aws_smithy_types::error::display::DisplayErrorContext;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

use crate::api_calls::ApiCalls;
use crate::provider::aws_rules::FailedLookup;
use crate::provider::seam::ProviderError;

/// A failed AWS call, naming the operation: `DescribeAutoScalingGroups: AccessDenied: ...`.
pub fn aws_error<E>(operation: &'static str, error: E) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    ProviderError::Aws {
        operation,
        message: error_text(&error),
    }
}

/// The error code and message of a failed call, as [`aws_error`] words them.
fn error_text<E>(error: &E) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match error.code() {
        Some(code) => format!("{code}: {}", error.message().unwrap_or("(no message)")),
        None => DisplayErrorContext(error).to_string(),
    }
}

/// Error codes AWS services use for throttling.
const THROTTLING_CODES: [&str; 9] = [
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "BandwidthLimitExceeded",
    "SlowDown",
];

/// Error codes about the caller (permissions, credentials), not about what was asked.
const CALLER_CODES: [&str; 8] = [
    "UnauthorizedOperation",
    "AccessDenied",
    "AccessDeniedException",
    "AuthFailure",
    "ExpiredToken",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "OptInRequired",
];

/// Whether a failed call's error concerns only what was asked (a template that no longer
/// exists, an image alias that does not resolve) rather than the service, the account or the
/// caller (throttling, a server error, no answer at all, missing permissions). Only the former
/// may be confined to the groups using that template: the others would hit every group alike,
/// so they fail the run.
pub fn concerns_only_the_request<E>(error: &SdkError<E, HttpResponse>) -> bool
where
    E: ProvideErrorMetadata,
{
    let SdkError::ServiceError(service) = error else {
        return false;
    };
    !service.raw().status().is_server_error()
        && !service
            .err()
            .code()
            .is_some_and(|code| THROTTLING_CODES.contains(&code) || CALLER_CODES.contains(&code))
}

/// Records a failed look-up about `template` when the error concerns only that request;
/// otherwise the run fails.
pub(crate) fn confine<E>(
    operation: &'static str,
    template: &str,
    error: SdkError<E, HttpResponse>,
    failed: &mut BTreeMap<String, FailedLookup>,
) -> Result<(), ProviderError>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    if !concerns_only_the_request(&error) {
        return Err(aws_error(operation, error));
    }
    let failure = FailedLookup {
        operation,
        error: error_text(&error),
    };
    tracing::warn!(
        operation,
        template,
        error = %failure.error,
        "look-up failed; the groups using this template are skipped this run"
    );
    failed.insert(template.to_owned(), failure);
    Ok(())
}

pub(crate) fn count(calls: &mut ApiCalls, operation: &'static str) {
    calls.aws(operation);
    tracing::debug!(operation, "aws call");
}
