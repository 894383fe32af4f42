//! A small HTTP client for what rotor says and asks outside Kubernetes (the drainer's health gate
//! and notifications): a GET or a JSON POST with a deadline and a capped answer, to an
//! [`HttpTarget`] an operator gave as a flag. It is the
//! hyper stack kube already builds (rustls with ring, the system's roots), not a second client.
//!
//! Operators put credentials in such URLs (`https://user:token@host/...`, `?token=...`, and a
//! Slack webhook's whole path), so a target is only ever shown through [`HttpTarget::shown`],
//! which leaves out the user and the query, or [`HttpTarget::origin`], which leaves out the path
//! too.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
pub use http::Method;
use http::Uri;
use http::uri::{Authority, PathAndQuery, Scheme};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Bodies longer than this are refused: a health answer is small, and a wrong URL must not
/// make the drainer buffer a file.
pub const MAX_BODY: usize = 1 << 20;

/// An `http://` or `https://` URL with a host, as given on the command line.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpTarget {
    scheme: Scheme,
    /// Host and port, without user information.
    authority: Authority,
    path_and_query: PathAndQuery,
    /// `user:password` from the URL, sent as HTTP Basic authentication.
    basic_auth: Option<String>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("{0:?} is not a URL: {1}")]
    NotAUrl(String, String),
    #[error("{0:?} has no scheme and host; write it as http://host[:port]/path or https://...")]
    NotAbsolute(String),
    #[error("{0:?} must use http or https")]
    Scheme(String),
}

impl FromStr for HttpTarget {
    type Err = TargetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // Errors quote the input without credentials: the message ends up in logs.
        let quoted = || redact_userinfo(s);
        let uri: Uri = s
            .parse()
            .map_err(|e: http::uri::InvalidUri| TargetError::NotAUrl(quoted(), e.to_string()))?;
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(TargetError::NotAbsolute(quoted()));
        };
        if *scheme != Scheme::HTTP && *scheme != Scheme::HTTPS {
            return Err(TargetError::Scheme(quoted()));
        }
        // A URL carries reserved characters of a password percent-encoded (`p%40ss`); the
        // header carries them as they are.
        let (basic_auth, host) = match authority.as_str().rsplit_once('@') {
            Some((userinfo, host)) => (Some(percent_decode(userinfo)), host),
            None => (None, authority.as_str()),
        };
        if host.is_empty() {
            return Err(TargetError::NotAbsolute(quoted()));
        }
        let authority =
            Authority::from_str(host).map_err(|e| TargetError::NotAUrl(quoted(), e.to_string()))?;
        // The http crate takes any text after the host's colon for a port. A password with a
        // `/`, `?` or `#` not percent-encoded ends the authority early and becomes that "port"
        // (`http://ops:pa?ss@host` is host `ops`, port `pa`): refuse it, without quoting it.
        let port = &authority.as_str()[authority.host().len()..];
        if !port.is_empty() && authority.port_u16().is_none() && port != ":" {
            return Err(TargetError::NotAUrl(
                quoted(),
                "the port is not a number from 0 to 65535 (percent-encode a password's reserved characters, e.g. ? as %3F)".into(),
            ));
        }
        Ok(HttpTarget {
            scheme: scheme.clone(),
            authority,
            path_and_query: uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/")),
            basic_auth,
        })
    }
}

/// The input as an error may quote it: no user information (whether or not a scheme comes
/// first) and no query, where credentials go. A password that was not percent-encoded may hold
/// `/`, `?`, `#` or `@`, so everything up to the last `@` counts as user information; and when a
/// `?` comes before that `@`, what follows the scheme cannot be told from a query, so none of
/// it is quoted.
fn redact_userinfo(s: &str) -> String {
    let scheme_end = s
        .find("://")
        .filter(|&i| {
            s[..i]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        })
        .map_or(0, |i| i + 3);
    let (scheme, rest) = s.split_at(scheme_end);
    let before_query = |t: &str| {
        t.split_once('?')
            .map_or(t, |(before, _)| before)
            .to_string()
    };
    match (rest.rfind('@'), rest.find('?')) {
        (Some(at), Some(query)) if query < at => format!("{scheme}…"),
        (Some(at), _) => format!("{scheme}…@{}", before_query(&rest[at + 1..])),
        (None, _) => format!("{scheme}{}", before_query(rest)),
    }
}

impl HttpTarget {
    /// The target as logs, Events and metrics show it: scheme, host and path; never the user
    /// information or the query, where credentials go.
    pub fn shown(&self) -> String {
        format!(
            "{}://{}{}",
            self.scheme,
            self.authority,
            self.path_and_query.path()
        )
    }

    /// Scheme and host only: for targets whose path is itself a secret (webhook URLs).
    pub fn origin(&self) -> String {
        format!("{}://{}", self.scheme, self.authority)
    }

    /// This target with `path` appended to its path and `query` added to its query (each pair
    /// percent-encoded; the base's own query, e.g. a `?token=`, is kept first): a Prometheus
    /// base URL becomes its API's query URL.
    pub fn with_path_and_query(&self, path: &str, query: &[(&str, &str)]) -> HttpTarget {
        let base = self.path_and_query.path().trim_end_matches('/');
        let mut pairs: Vec<String> = self
            .path_and_query
            .query()
            .filter(|q| !q.is_empty())
            .map(str::to_string)
            .into_iter()
            .collect();
        pairs.extend(
            query
                .iter()
                .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v))),
        );
        let mut joined = format!("{base}{path}");
        if !pairs.is_empty() {
            joined = format!("{joined}?{}", pairs.join("&"));
        }
        HttpTarget {
            path_and_query: PathAndQuery::from_str(&joined)
                .expect("a path and a percent-encoded query always parse"),
            ..self.clone()
        }
    }

    fn uri(&self) -> Uri {
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(self.path_and_query.clone())
            .build()
            .expect("parts taken from a parsed URI")
    }
}

impl fmt::Debug for HttpTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown())
    }
}

/// `%XX` sequences decoded (bytes that do not form UTF-8 are replaced); anything else kept.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Everything but the unreserved characters of RFC 3986, percent-encoded.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What a GET answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

/// What [`HttpClient::exchange`] answered: the status, the headers (a `Retry-After`) and the body.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// Why a GET got no answer. The words name no credentials.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("no answer within {}s", .0.as_secs_f64())]
    Timeout(Duration),
    #[error("could not reach it: {0}")]
    Unreachable(String),
    #[error("its answer could not be read: {0}")]
    Body(String),
    #[error("could not set up TLS: {0}")]
    Tls(String),
}

/// A client for [`HttpTarget`]s; cheap to clone.
#[derive(Clone)]
pub struct HttpClient {
    inner: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl HttpClient {
    pub fn new() -> Result<HttpClient, HttpError> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| HttpError::Tls(e.to_string()))?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(HttpClient {
            inner: Client::builder(TokioExecutor::new()).build(https),
        })
    }

    /// GETs `target`, all of it (connect, answer and body) within `timeout`.
    pub async fn get(&self, target: &HttpTarget, timeout: Duration) -> Result<Answer, HttpError> {
        let request = http::Request::get(target.uri()).header(http::header::ACCEPT, "*/*");
        self.send(target, request, Bytes::new(), timeout).await
    }

    /// POSTs `json` to `target` as `application/json`, within `timeout`.
    pub async fn post_json(
        &self,
        target: &HttpTarget,
        json: &serde_json::Value,
        timeout: Duration,
    ) -> Result<Answer, HttpError> {
        self.upload(
            http::Method::POST,
            target,
            "application/json",
            Bytes::from(json.to_string()),
            timeout,
        )
        .await
    }

    /// Sends `body` to `target` with `method` (POST, PUT) as `content_type`, within `timeout`.
    pub async fn upload(
        &self,
        method: http::Method,
        target: &HttpTarget,
        content_type: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Answer, HttpError> {
        let request = http::Request::builder()
            .method(method)
            .uri(target.uri())
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::ACCEPT, "*/*");
        self.send(target, request, body, timeout).await
    }

    /// Sends a request built by the caller (any method, its own headers, e.g. a bearer token)
    /// and returns status, headers and a body of at most `max_body` bytes, all within `timeout`.
    /// For API clients (the Azure provider's ARM calls and token requests); the request's URI
    /// is the caller's to keep out of logs.
    pub async fn exchange(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
        max_body: usize,
    ) -> Result<Exchange, HttpError> {
        let request = request.map(Full::new);
        let exchange = async {
            let response = self
                .inner
                .request(request)
                .await
                .map_err(|e| HttpError::Unreachable(error_chain(&e)))?;
            let status = response.status().as_u16();
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, max_body)
                .collect()
                .await
                .map_err(|e| HttpError::Body(e.to_string()))?
                .to_bytes();
            Ok(Exchange {
                status,
                headers: parts.headers,
                body,
            })
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| HttpError::Timeout(timeout))?
    }

    async fn send(
        &self,
        target: &HttpTarget,
        mut request: http::request::Builder,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Answer, HttpError> {
        if let Some(userinfo) = &target.basic_auth {
            let encoded = base64::engine::general_purpose::STANDARD.encode(userinfo);
            request = request.header(http::header::AUTHORIZATION, format!("Basic {encoded}"));
        }
        let request = request
            .body(body)
            .expect("a request with valid parts builds");
        let answer = self.exchange(request, timeout, MAX_BODY).await?;
        Ok(Answer {
            status: answer.status,
            body: answer.body,
        })
    }
}

/// hyper's top error says only "client error (Connect)"; the cause (refused, DNS, TLS) is below.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut words = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        words = format!("{words}: {cause}");
        source = cause.source();
    }
    words
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_and_show_without_credentials() {
        let t: HttpTarget = "https://ops:s3cret@prom.example:9090/prometheus?token=abc"
            .parse()
            .unwrap();
        assert_eq!(t.shown(), "https://prom.example:9090/prometheus");
        assert_eq!(format!("{t:?}"), "https://prom.example:9090/prometheus");
        assert_eq!(t.basic_auth.as_deref(), Some("ops:s3cret"));
        let plain: HttpTarget = "http://10.0.0.1:8080".parse().unwrap();
        assert_eq!(plain.shown(), "http://10.0.0.1:8080/");
        let slack: HttpTarget = "https://hooks.slack.com/services/T0/B0/secret"
            .parse()
            .unwrap();
        assert_eq!(slack.origin(), "https://hooks.slack.com");
        assert_eq!(plain.basic_auth, None);
        let encoded: HttpTarget = "https://ops:p%40ss%3Aw0rd@prom.example/".parse().unwrap();
        assert_eq!(encoded.basic_auth.as_deref(), Some("ops:p@ss:w0rd"));
        // A lone or broken escape is kept as written.
        assert_eq!(percent_decode("a%4"), "a%4");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[test]
    fn bad_targets_are_refused_without_echoing_credentials() {
        let cases = [
            ("prom:9090", "no scheme and host"),
            ("/api/v1/query", "no scheme and host"),
            ("ftp://host/x", "must use http or https"),
            ("http://", "not a URL"),
            ("http://us er:pw@ho st/", "not a URL"),
        ];
        for (input, expected) in cases {
            let err = input.parse::<HttpTarget>().unwrap_err().to_string();
            assert!(err.contains(expected), "{input}: {err}");
        }
        for leaky in [
            "http://u:hunter2@ho st/",
            "u:hunter2@prom:9090",
            "u:hunter2@prom:9090/path",
            "prom:9090/x?token=hunter2",
            "u:p@ho st/?next=http://x?token=hunter2",
        ] {
            let err = leaky.parse::<HttpTarget>().unwrap_err().to_string();
            assert!(!err.contains("hunter2"), "{leaky}: {err}");
        }
    }

    /// Found by the properties in `fuzz.rs`: a password with a `?`, `/` or `#` that was not
    /// percent-encoded ended the authority early and became its "port", which the http crate
    /// accepts as text: the target was host `ops`, shown as `http://ops:hunter2/`, and a refusal
    /// quoted the text before the `?`.
    #[test]
    fn an_unencoded_password_is_refused_without_being_quoted() {
        for input in [
            "http://ops:hunter2?x@prom.example/",
            "https://ops:hunter2/x@prom.example",
            "http://ops:hunter2#x@prom.example",
            "http://ops:hunter2?x@prom.example/?email=a@b&token=hunter2",
        ] {
            let err = input.parse::<HttpTarget>().unwrap_err().to_string();
            assert!(err.contains("the port is not a number"), "{input}: {err}");
            assert!(!err.contains("hunter2"), "{input}: {err}");
        }
        for input in ["http://prom.example:x9090/", "http://prom.example:65536/"] {
            let err = input.parse::<HttpTarget>().unwrap_err().to_string();
            assert!(err.contains("the port is not a number"), "{input}: {err}");
        }
        for good in [
            "http://prom.example:/",
            "http://[::1]:9090/x",
            "http://[::1]/",
            "http://h:0",
        ] {
            assert!(good.parse::<HttpTarget>().is_ok(), "{good}");
        }
    }

    #[test]
    fn query_paths_join_and_encode() {
        let t: HttpTarget = "http://prom:9090/prom/".parse().unwrap();
        let q = t.with_path_and_query(
            "/api/v1/query",
            &[("query", r#"ALERTS{alertstate="firing",severity=~"crit.*"}"#)],
        );
        assert_eq!(
            q.uri().to_string(),
            "http://prom:9090/prom/api/v1/query?query=ALERTS%7Balertstate%3D%22firing%22%2Cseverity%3D~%22crit.%2A%22%7D"
        );
        // The query, where a token may be, is not shown.
        assert_eq!(q.shown(), "http://prom:9090/prom/api/v1/query");
        // A base URL's own query (a token) goes along, first.
        let with_token: HttpTarget = "https://prom.example/?token=abc".parse().unwrap();
        assert_eq!(
            with_token
                .with_path_and_query("/api/v1/query", &[("query", "up")])
                .uri()
                .to_string(),
            "https://prom.example/api/v1/query?token=abc&query=up"
        );
    }
}
