//! A validating admission webhook on `pods/eviction`, as a policy engine (Kyverno, Gatekeeper)
//! or a PDB-aware webhook registers one, for a [`RealCluster`]'s API server to call.
//!
//! It serves HTTPS on `127.0.0.1` with the API server's own serving certificate (issued for
//! `127.0.0.1` by `--cert-dir`), so the `caBundle` of its registration is the CA the kubeconfigs
//! already trust. It reads each `AdmissionReview` (admission.k8s.io/v1) and answers with the
//! verdict set for the pod's namespace (or the default one), changeable while it runs:
//! allow, refuse with a message (as a policy does: `allowed: false`, no code, which the API
//! server turns into 403), answer HTTP 500, or hang past the registration's timeout. Every
//! review it receives is recorded. HTTP/1.1 only; the API server falls back to it.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::RealCluster;
use crate::fault_proxy::{serving_cert_and_key, tls_acceptor};

/// What the webhook answers for a pod's eviction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// `allowed: false` with this message, as a policy engine refuses.
    Refuse(String),
    /// HTTP 500 with a plain body: the webhook itself is broken.
    Error500,
    /// No answer until long after any registration's timeout (30 s at most).
    Hang,
}

/// One review the webhook received.
#[derive(Clone, Debug)]
pub struct Review {
    pub namespace: String,
    /// The pod's name (the eviction's target).
    pub name: String,
    /// Who asked: the requesting user.
    pub user: String,
    pub verdict: Verdict,
    /// Since the webhook started.
    pub at: Duration,
}

struct Shared {
    verdicts: Mutex<(Verdict, BTreeMap<String, Verdict>)>,
    reviews: Mutex<Vec<Review>>,
    started: Instant,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The running webhook (see the module docs); stops on drop.
pub struct AdmissionWebhook {
    shared: Arc<Shared>,
    port: u16,
    ca_bundle: String,
    shutdown: CancellationToken,
    thread: Option<JoinHandle<()>>,
}

impl AdmissionWebhook {
    /// A webhook for `cluster`'s API server, allowing everything until told otherwise.
    pub fn start(cluster: &RealCluster) -> AdmissionWebhook {
        let (cert, key) = serving_cert_and_key(cluster);
        let pem =
            std::fs::read(&cert).unwrap_or_else(|e| panic!("cannot read {}: {e}", cert.display()));
        let ca_bundle = base64::engine::general_purpose::STANDARD.encode(pem);
        let acceptor = tls_acceptor(&cert, &key);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("the webhook's address").port();
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener for tokio");
        let shared = Arc::new(Shared {
            verdicts: Mutex::new((Verdict::Allow, BTreeMap::new())),
            reviews: Mutex::new(Vec::new()),
            started: Instant::now(),
        });
        let shutdown = CancellationToken::new();
        let thread = {
            let (shared, shutdown) = (shared.clone(), shutdown.clone());
            std::thread::Builder::new()
                .name(format!("admission-webhook-{port}"))
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("the webhook's runtime");
                    runtime.block_on(async move {
                        let listener =
                            TcpListener::from_std(listener).expect("the listener on the runtime");
                        loop {
                            let tcp = tokio::select! {
                                _ = shutdown.cancelled() => return,
                                accepted = listener.accept() => match accepted {
                                    Ok((tcp, _)) => tcp,
                                    Err(_) => continue,
                                },
                            };
                            let (acceptor, shared) = (acceptor.clone(), shared.clone());
                            tokio::spawn(async move {
                                let Ok(tls) = acceptor.accept(tcp).await else {
                                    return;
                                };
                                let service = service_fn(move |req| {
                                    let shared = shared.clone();
                                    async move { Ok::<_, Infallible>(review(&shared, req).await) }
                                });
                                let _ = hyper::server::conn::http1::Builder::new()
                                    .serve_connection(TokioIo::new(tls), service)
                                    .await;
                            });
                        }
                    });
                })
                .expect("spawn the webhook's thread")
        };
        AdmissionWebhook {
            shared,
            port,
            ca_bundle,
            shutdown,
            thread: Some(thread),
        }
    }

    /// The verdict for every namespace without one of its own.
    pub fn set_default(&self, verdict: Verdict) {
        lock(&self.shared.verdicts).0 = verdict;
    }

    /// The verdict for the evictions of pods in `namespace`.
    pub fn set(&self, namespace: &str, verdict: Verdict) {
        lock(&self.shared.verdicts)
            .1
            .insert(namespace.to_string(), verdict);
    }

    /// Every review received so far.
    pub fn reviews(&self) -> Vec<Review> {
        lock(&self.shared.reviews).clone()
    }

    /// A `ValidatingWebhookConfiguration` named `name` sending every `pods/eviction` CREATE to
    /// this webhook, with `failurePolicy` and `timeoutSeconds` as given, as JSON.
    pub fn registration(&self, name: &str, failure_policy: &str, timeout_seconds: u32) -> Value {
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": format!("{name}.rotor.test"),
                "clientConfig": {
                    "url": format!("https://127.0.0.1:{}/validate", self.port),
                    "caBundle": self.ca_bundle,
                },
                "rules": [{
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["pods/eviction"],
                    "scope": "Namespaced",
                }],
                "failurePolicy": failure_policy,
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": timeout_seconds,
            }],
        })
    }
}

impl Drop for AdmissionWebhook {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Answers one `AdmissionReview`.
async fn review(shared: &Shared, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let body = match req.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return plain(StatusCode::BAD_REQUEST, "unreadable body"),
    };
    let Ok(review) = serde_json::from_slice::<Value>(&body) else {
        return plain(StatusCode::BAD_REQUEST, "not an AdmissionReview");
    };
    let request = &review["request"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let namespace = text(&request["namespace"]);
    let verdict = {
        let verdicts = lock(&shared.verdicts);
        verdicts.1.get(&namespace).unwrap_or(&verdicts.0).clone()
    };
    lock(&shared.reviews).push(Review {
        namespace,
        name: text(&request["name"]),
        user: text(&request["userInfo"]["username"]),
        verdict: verdict.clone(),
        at: shared.started.elapsed(),
    });
    let response = |allowed: bool, message: Option<&str>| {
        let mut answer = json!({"uid": request["uid"], "allowed": allowed});
        if let Some(message) = message {
            answer["status"] = json!({"message": message});
        }
        let body = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": answer,
        });
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("a valid response")
    };
    match verdict {
        Verdict::Allow => response(true, None),
        Verdict::Refuse(message) => response(false, Some(&message)),
        Verdict::Error500 => plain(StatusCode::INTERNAL_SERVER_ERROR, "the policy engine broke"),
        Verdict::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            response(true, None)
        }
    }
}

fn plain(code: StatusCode, text: &str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from(text.to_string())))
        .expect("a valid response")
}
