//! Azure Resource Manager tokens for the Azure provider: where they come from
//! ([`TokenSource`]) and the HTTP transport Microsoft's credential types use to fetch them
//! ([`HyperTransport`]: rotor-core's hyper client, rustls with ring; no reqwest, no OpenSSL).
//!
//! The chain, first that applies:
//! 1. `ROTOR_AZURE_TOKEN`: a static bearer token, **for tests only** (the fake ARM server of
//!    `tests/src/fake_azure.rs`); it is never refreshed, so an expired one fails the run.
//! 2. Workload identity (`azure_identity::WorkloadIdentityCredential`), when
//!    `AZURE_FEDERATED_TOKEN_FILE` is set (AKS workload identity's webhook sets it, with
//!    `AZURE_CLIENT_ID` and `AZURE_TENANT_ID`).
//! 3. Managed identity (`azure_identity::ManagedIdentityCredential`: the node's IMDS, or the
//!    identity `AZURE_CLIENT_ID` names).
//!
//! azure_identity 1.0 has no `DefaultAzureCredential` (its developer chain is Azure CLI and azd
//! only), hence this explicit chain.

use std::sync::Arc;
use std::time::Duration;

use azure_core::credentials::TokenCredential;
use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
use azure_core::http::{AsyncRawResponse, Body, ClientOptions, HttpClient, Request, Transport};
use azure_identity::{
    ClientAssertionCredentialOptions, ManagedIdentityCredential, ManagedIdentityCredentialOptions,
    UserAssignedId, WorkloadIdentityCredential, WorkloadIdentityCredentialOptions,
};
use bytes::Bytes;

/// The scope of an Azure Resource Manager token.
pub const ARM_SCOPE: &str = "https://management.azure.com/.default";

/// The environment variable of a static token, for tests.
pub const STATIC_TOKEN_ENV: &str = "ROTOR_AZURE_TOKEN";

/// How long a token request may take.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest token answer read.
const MAX_TOKEN_BODY: usize = 1 << 20;

/// Where ARM bearer tokens come from.
#[derive(Clone, Debug)]
pub enum TokenSource {
    /// `ROTOR_AZURE_TOKEN` (tests only): the same token every time.
    Static(String),
    /// One of Microsoft's credential types; it caches the token until shortly before expiry.
    Credential {
        /// `workload identity` or `managed identity`, for messages.
        kind: &'static str,
        credential: Arc<dyn TokenCredential>,
    },
}

/// No credential could be set up (exit 2, before any call).
#[derive(Debug, thiserror::Error)]
#[error("Azure {kind} credential: {message}")]
pub struct TokenSetupError {
    pub kind: &'static str,
    pub message: String,
}

impl TokenSource {
    /// The chain described at the top of this module, read from the environment.
    pub fn from_env(http: rotor_core::http::HttpClient) -> Result<TokenSource, TokenSetupError> {
        if let Some(token) = std::env::var(STATIC_TOKEN_ENV)
            .ok()
            .filter(|t| !t.trim().is_empty())
        {
            return Ok(TokenSource::Static(token.trim().to_owned()));
        }
        let client_options = ClientOptions {
            transport: Some(Transport::new(Arc::new(HyperTransport { http }))),
            ..ClientOptions::default()
        };
        if std::env::var_os("AZURE_FEDERATED_TOKEN_FILE").is_some() {
            let kind = "workload identity";
            let credential =
                WorkloadIdentityCredential::new(Some(WorkloadIdentityCredentialOptions {
                    credential_options: ClientAssertionCredentialOptions { client_options },
                    ..WorkloadIdentityCredentialOptions::default()
                }))
                .map_err(|e| TokenSetupError {
                    kind,
                    message: e.to_string(),
                })?;
            return Ok(TokenSource::Credential { kind, credential });
        }
        let kind = "managed identity";
        let user_assigned_id = std::env::var("AZURE_CLIENT_ID")
            .ok()
            .filter(|id| !id.trim().is_empty())
            .map(|id| UserAssignedId::ClientId(id.trim().to_owned()));
        let credential = ManagedIdentityCredential::new(Some(ManagedIdentityCredentialOptions {
            user_assigned_id,
            client_options,
        }))
        .map_err(|e| TokenSetupError {
            kind,
            message: e.to_string(),
        })?;
        Ok(TokenSource::Credential { kind, credential })
    }

    /// A bearer token for ARM. The credential types cache a token until shortly before it
    /// expires; asked again after a 401 they hand out the cached one unless it has expired,
    /// which is the case a 401 most often means. A static token is the same every time.
    pub async fn token(&self) -> Result<String, String> {
        match self {
            TokenSource::Static(token) => Ok(token.clone()),
            TokenSource::Credential { kind, credential } => credential
                .get_token(&[ARM_SCOPE], None)
                .await
                .map(|token| token.token.secret().to_owned())
                .map_err(|e| format!("{kind}: {e}")),
        }
    }
}

/// Microsoft's credential types over rotor-core's hyper client.
#[derive(Clone)]
pub struct HyperTransport {
    pub http: rotor_core::http::HttpClient,
}

impl std::fmt::Debug for HyperTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HyperTransport")
    }
}

#[async_trait::async_trait]
impl HttpClient for HyperTransport {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        use azure_core::error::{Error, ErrorKind};
        let body = match request.body() {
            Body::Bytes(bytes) => Bytes::copy_from_slice(bytes),
            #[allow(unreachable_patterns)]
            _ => {
                return Err(Error::with_message(
                    ErrorKind::Other,
                    "streamed request bodies are not supported by rotor's transport",
                ));
            }
        };
        let mut builder = http::Request::builder()
            .method(request.method().as_str())
            .uri(request.url().as_str());
        for (name, value) in request.headers().iter() {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let built = builder
            .body(body)
            .map_err(|e| Error::with_error(ErrorKind::Other, e, "building a token request"))?;
        let answer = self
            .http
            .exchange(built, TOKEN_TIMEOUT, MAX_TOKEN_BODY)
            .await
            .map_err(|e| Error::with_message(ErrorKind::Io, e.to_string()))?;
        let mut headers = Headers::new();
        for (name, value) in &answer.headers {
            if let Ok(value) = value.to_str() {
                headers.insert(
                    HeaderName::from(name.as_str().to_owned()),
                    HeaderValue::from(value.to_owned()),
                );
            }
        }
        Ok(AsyncRawResponse::from_bytes(
            answer.status.into(),
            headers,
            answer.body,
        ))
    }
}
