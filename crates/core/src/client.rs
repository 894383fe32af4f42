//! Kubernetes client construction shared by every rotor binary: command-line/environment options
//! ([`KubeArgs`]), loading a [`kube::Config`] from them, and building clients with or without kube's
//! built-in retry. Errors name the kubeconfig and context that failed and say what to do.

use std::path::PathBuf;

use kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};

/// Where to find the cluster.
///
/// With neither option set, kube's normal inference applies: the files listed in `KUBECONFIG`,
/// otherwise `~/.kube/config`, otherwise the in-cluster service account. rotor deliberately reads its
/// own `ROTOR_KUBECONFIG` rather than `KUBECONFIG` for `--kubeconfig`, so that `KUBECONFIG` keeps its
/// usual meaning (a list of files to merge) and is never silently turned into a single path.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
// A flattened group's doc comment would otherwise replace the binary's own description at
// the top of `--help`; it is for rustdoc only.
#[command(about = None, long_about = None)]
pub struct KubeArgs {
    /// Kubeconfig file to use. When unset: the files in KUBECONFIG, then ~/.kube/config, then the
    /// in-cluster service account.
    #[arg(long, env = "ROTOR_KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use instead of the current context. Requires a kubeconfig (it disables
    /// the in-cluster fallback).
    #[arg(long, env = "ROTOR_KUBE_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
}

/// Loading the Kubernetes configuration or building a client failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file given with `--kubeconfig` could not be read or parsed.
    #[error(
        "cannot read kubeconfig {}: {source}; check the path given with --kubeconfig or ROTOR_KUBECONFIG",
        path.display()
    )]
    ReadKubeconfig {
        /// The path given.
        path: PathBuf,
        /// What kube reported.
        #[source]
        source: KubeconfigError,
    },

    /// The kubeconfig was read, but the requested (or current) context could not be used.
    #[error(
        "cannot use {} from kubeconfig {source_desc}: {source}; list contexts with `kubectl config get-contexts` and choose one with --context or ROTOR_KUBE_CONTEXT",
        context.as_deref().map_or_else(|| "the current context".to_owned(), |c| format!("context {c:?}"))
    )]
    KubeconfigContext {
        /// Where the kubeconfig came from (a path, or "KUBECONFIG / ~/.kube/config").
        source_desc: String,
        /// The context asked for, if one was.
        context: Option<String>,
        /// What kube reported.
        #[source]
        source: KubeconfigError,
    },

    /// Neither a kubeconfig nor an in-cluster service account was found.
    #[error(
        "cannot find Kubernetes credentials: no usable kubeconfig (KUBECONFIG, ~/.kube/config) and no in-cluster service account: {source}; pass --kubeconfig / ROTOR_KUBECONFIG, or run in a pod with a service account"
    )]
    Infer {
        /// What kube reported.
        #[source]
        source: InferConfigError,
    },

    /// The configuration was loaded but kube could not build a client from it (TLS material,
    /// proxy, authentication settings).
    #[error(
        "cannot build a Kubernetes client for {cluster_url}: {source}; check the cluster's certificate authority, proxy and user settings in the kubeconfig"
    )]
    Build {
        /// The API server the client was for.
        cluster_url: String,
        /// What kube reported.
        #[source]
        source: kube::Error,
    },
}

/// Loads the Kubernetes configuration the way [`KubeArgs`] describes.
///
/// - `--kubeconfig` set: that file only, with `--context` or its current context.
/// - only `--context` set: `KUBECONFIG` or `~/.kube/config`, with that context (no in-cluster
///   fallback, since in-cluster has no contexts).
/// - neither: [`Config::infer`] (kubeconfig from `KUBECONFIG` / `~/.kube/config`, else in-cluster).
///
/// The returned config keeps kube's defaults, including `default_retry = true`.
pub async fn load_config(args: &KubeArgs) -> Result<Config, ClientError> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    match (&args.kubeconfig, &args.context) {
        (Some(path), _) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| ClientError::ReadKubeconfig {
                    path: path.clone(),
                    source,
                })?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|source| ClientError::KubeconfigContext {
                    source_desc: path.display().to_string(),
                    context: args.context.clone(),
                    source,
                })
        }
        (None, Some(context)) => Config::from_kubeconfig(&options).await.map_err(|source| {
            ClientError::KubeconfigContext {
                source_desc: "KUBECONFIG / ~/.kube/config".to_owned(),
                context: Some(context.clone()),
                source,
            }
        }),
        (None, None) => Config::infer()
            .await
            .map_err(|source| ClientError::Infer { source }),
    }
}

/// Builds a client with kube's default behaviour, including its built-in retry of 429/503/504
/// responses (`default_retry` as kube sets it). Fine for reads, watches and patches.
///
/// Must be called inside a Tokio runtime (the client spawns a background task).
pub fn client(config: Config) -> Result<Client, ClientError> {
    let cluster_url = config.cluster_url.to_string();
    Client::try_from(config).map_err(|source| ClientError::Build {
        cluster_url,
        source,
    })
}

/// Builds a client that never retries on its own: every 429, 503 and 504 reaches the caller.
///
/// Why: since kube 4, `Config::default_retry` is true and the client silently retries 429/503/504 up
/// to 15 times with back-off growing towards 1000 s. A PodDisruptionBudget refusing an eviction
/// answers 429, so with the default client that refusal would not reach the drainer for minutes, and
/// the drainer could neither report the blocking budget nor apply its own retry policy (kube's
/// `Config::default_retry` documentation on docs.rs). Use this client for evictions. A 429's
/// `Retry-After` header reaches the caller as the error's `details.retryAfterSeconds`
/// ([`crate::retry_after`]), so its own retry can honour it.
///
/// Must be called inside a Tokio runtime (the client spawns a background task).
pub fn client_without_retry(config: Config) -> Result<Client, ClientError> {
    let cluster_url = config.cluster_url.to_string();
    let builder =
        kube::client::ClientBuilder::try_from(without_retry(config)).map_err(|source| {
            ClientError::Build {
                cluster_url,
                source,
            }
        })?;
    Ok(builder
        .with_layer(&crate::retry_after::RetryAfterLayer)
        .build())
}

/// `config` with kube's built-in retry turned off (`default_retry = false`); see
/// [`client_without_retry`].
pub fn without_retry(mut config: Config) -> Config {
    config.default_retry = false;
    config
}

/// The HTTP status a watch failed with, when the API server answered one (`404`: the resource
/// is not served, e.g. its CRD is not installed; `403`: RBAC refuses it).
pub fn watch_failure_status(error: &kube::runtime::watcher::Error) -> Option<u16> {
    use kube::runtime::watcher::Error;
    match error {
        Error::InitialListFailed(kube::Error::Api(status))
        | Error::WatchStartFailed(kube::Error::Api(status))
        | Error::WatchFailed(kube::Error::Api(status)) => Some(status.code),
        Error::WatchError(status) => Some(status.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    const KUBECONFIG_YAML: &str = r#"
apiVersion: v1
kind: Config
current-context: first
clusters:
- name: one
  cluster:
    server: http://127.0.0.1:1
- name: two
  cluster:
    server: http://127.0.0.1:2
contexts:
- name: first
  context:
    cluster: one
    user: nobody
    namespace: rotor-system
- name: second
  context:
    cluster: two
    user: nobody
users:
- name: nobody
  user:
    token: not-a-real-token
"#;

    /// A file under the system temp dir that is removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(tag: &str, contents: &str) -> Self {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = std::env::temp_dir().join(format!(
                "rotor-core-{tag}-{}-{n}-{nanos}.yaml",
                std::process::id()
            ));
            std::fs::write(&path, contents).expect("write temp kubeconfig");
            TempFile(path)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn args(path: &Path, context: Option<&str>) -> KubeArgs {
        KubeArgs {
            kubeconfig: Some(path.to_owned()),
            context: context.map(str::to_owned),
        }
    }

    #[tokio::test]
    async fn loads_explicit_kubeconfig_and_context() {
        let file = TempFile::new("kubeconfig", KUBECONFIG_YAML);

        let config = load_config(&args(file.path(), None)).await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:1/");
        assert_eq!(config.default_namespace, "rotor-system");
        assert!(config.default_retry, "kube's default retry is kept");

        let config = load_config(&args(file.path(), Some("second")))
            .await
            .unwrap();
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:2/");
        assert_eq!(config.default_namespace, "default");

        let no_retry = without_retry(config.clone());
        assert!(!no_retry.default_retry);
        assert_eq!(no_retry.cluster_url, config.cluster_url);

        client(config.clone()).expect("client with retry");
        client_without_retry(config).expect("client without retry");
    }

    #[tokio::test]
    async fn unknown_context_is_named() {
        let file = TempFile::new("kubeconfig-ctx", KUBECONFIG_YAML);
        let err = load_config(&args(file.path(), Some("nope")))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ClientError::KubeconfigContext { .. }),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("\"nope\""), "{message}");
        assert!(
            message.contains(&file.path().display().to_string()),
            "{message}"
        );
        assert!(message.contains("--context"), "{message}");
    }

    #[tokio::test]
    async fn missing_kubeconfig_names_the_path() {
        let path = std::env::temp_dir().join(format!(
            "rotor-core-does-not-exist-{}.yaml",
            std::process::id()
        ));
        let err = load_config(&args(&path, None)).await.unwrap_err();
        assert!(matches!(err, ClientError::ReadKubeconfig { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("--kubeconfig"), "{message}");
    }

    #[tokio::test]
    async fn unparsable_kubeconfig_names_the_path() {
        let file = TempFile::new("kubeconfig-bad", "clusters: [this is: not: valid");
        let err = load_config(&args(file.path(), None)).await.unwrap_err();
        assert!(
            err.to_string().contains(&file.path().display().to_string()),
            "{err}"
        );
    }

    /// Serves `429 TooManyRequests` (a PDB-style refusal) to every request and counts requests.
    async fn always_429() -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    counter.fetch_add(1, Ordering::SeqCst);
                    let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Cannot evict pod as it would violate the pod's disruption budget.","reason":"TooManyRequests","details":{"causes":[{"reason":"DisruptionBudget","message":"The disruption budget web needs 2 healthy pods and has 2 currently"}]},"code":429}"#;
                    let response = format!(
                        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        (url, hits)
    }

    #[tokio::test]
    async fn client_without_retry_surfaces_429_at_once() {
        let (url, hits) = always_429().await;
        let file = TempFile::new(
            "kubeconfig-429",
            &format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: s\n  cluster:\n    server: {url}\ncontexts:\n- name: c\n  context:\n    cluster: s\n"
            ),
        );
        let config = load_config(&args(file.path(), None)).await.unwrap();

        // Without retry: exactly one request, and the 429 reaches the caller.
        let no_retry = client_without_retry(config.clone()).unwrap();
        let err = tokio::time::timeout(Duration::from_secs(10), no_retry.apiserver_version())
            .await
            .expect("no-retry client answers promptly")
            .unwrap_err();
        match err {
            kube::Error::Api(status) => assert_eq!(status.code, 429),
            other => panic!("expected an API error, got {other:?}"),
        }
        assert_eq!(hits.load(Ordering::SeqCst), 1);

        // With kube's default retry, the same refusal is retried behind the caller's back.
        let retrying = client(config).unwrap();
        let request = tokio::spawn(async move { retrying.apiserver_version().await });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while hits.load(Ordering::SeqCst) < 3 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "default client did not retry"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!request.is_finished());
        request.abort();
    }
}
