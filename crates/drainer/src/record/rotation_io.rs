//! Reading and writing the rotation's record ([`crate::record::rotation`] says what its keys
//! hold): server-side apply, a field manager per part, so writing one part never takes away
//! another's keys.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};

use crate::record::rotation::{
    Enforced, Halt, HaltState, HealthGateState, RecordRef, RotationView, halt_from_data,
    halt_to_data, resume_patch, waiting_to_data,
};
use crate::watch_backoff::WatchBackoffExt;

/// The field managers of the record's parts.
const HEALTH_MANAGER: &str = "rotor-drainer-health";
const HALT_MANAGER: &str = "rotor-drainer-halt";
const RESUME_MANAGER: &str = "rotor-drainer-resume";
const WAITING_MANAGER: &str = "rotor-drainer-waiting";
const LEADER_MANAGER: &str = "rotor-drainer-leader";

/// Applies `data` to the record as `manager` (server-side apply: created if missing, the other
/// managers' keys left alone).
async fn apply(
    client: &kube::Client,
    at: &RecordRef,
    manager: &str,
    data: BTreeMap<String, String>,
) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &at.namespace);
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": at.name,
            "labels": { "app.kubernetes.io/name": "rotor-drainer" },
        },
        "data": data,
    });
    api.patch(
        &at.name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&body),
    )
    .await
    .map(|_| ())
}

/// Writes the health gate's state into the record.
pub async fn write_health(
    client: &kube::Client,
    at: &RecordRef,
    state: &HealthGateState,
) -> Result<(), kube::Error> {
    apply(client, at, HEALTH_MANAGER, state.to_data()).await
}

/// Writes why the tainted nodes that have not started wait (the leader's last round), at most
/// [`crate::record::rotation::WAITING_SHOWN`] of them.
pub async fn write_waiting(
    client: &kube::Client,
    at: &RecordRef,
    waiting: &BTreeMap<String, String>,
) -> Result<(), kube::Error> {
    apply(client, at, WAITING_MANAGER, waiting_to_data(waiting)).await
}

/// Writes what the current term's leader enforces (as each term begins), retried for about a
/// minute while a retry may pass (a 429, a 5xx, no answer): until it lands, `status` reads the
/// previous leader's.
pub async fn write_enforced(
    client: &kube::Client,
    at: &RecordRef,
    enforced: Enforced,
) -> Result<(), kube::Error> {
    use backon::{ExponentialBuilder, Retryable};
    let backoff = ExponentialBuilder::default()
        .with_min_delay(std::time::Duration::from_secs(1))
        .with_max_delay(std::time::Duration::from_secs(30))
        .with_max_times(5);
    (|| apply(client, at, LEADER_MANAGER, enforced.to_data()))
        .retry(backoff)
        .when(crate::record::node_io::may_pass_if_repeated)
        .await
}

/// Writes a halt into the record.
pub async fn write_halt(
    client: &kube::Client,
    at: &RecordRef,
    halt: &Halt,
) -> Result<(), kube::Error> {
    apply(client, at, HALT_MANAGER, halt_to_data(halt)).await
}

/// What a resume found.
#[derive(Debug)]
pub enum Resumed {
    /// The halt, lifted; `server_clock` is false when `resumedAt` had to be stamped with this
    /// machine's clock (the API server's answer carried no date).
    Lifted { halt: Halt, server_clock: bool },
    /// The record says the rotation is not halted (nothing is written).
    NotHalted,
    /// There is no record there: no rotation since the drainer's install, or another place
    /// (the drainer runs in another namespace, or with another lease name).
    NoRecord,
}

/// Lifts a halt: removes the halt's keys and records when (what restarts the breaker's
/// clocks). The time is the API server's, as nodes' creation times are, which the breaker
/// weighs it against: a workstation's clock behind by `--halt-after` would re-halt at once.
pub async fn resume(client: &kube::Client, at: &RecordRef) -> Result<Resumed, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &at.namespace);
    let Some(record) = api.get_opt(&at.name).await? else {
        return Ok(Resumed::NoRecord);
    };
    let Some(halt) = halt_from_data(&record.data.unwrap_or_default()).halted else {
        return Ok(Resumed::NotHalted);
    };
    // A merge patch, as a person's `kubectl patch` would be: the halt's manager gives its keys
    // up, and the next halt applies them again.
    let server_time = server_clock(client).await;
    let patch = resume_patch(server_time.unwrap_or_else(Timestamp::now));
    api.patch(
        &at.name,
        &PatchParams {
            field_manager: Some(RESUME_MANAGER.into()),
            ..PatchParams::default()
        },
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(Resumed::Lifted {
        halt,
        server_clock: server_time.is_some(),
    })
}

/// The API server's clock: the `Date` of its answer to `GET /version`, which every client may
/// read. `None` when there is no answer or it carries no date that parses.
pub async fn server_clock(client: &kube::Client) -> Option<Timestamp> {
    let request = http::Request::get("/version")
        .body(kube::client::Body::from(Vec::new()))
        .ok()?;
    let response = client.send(request).await.ok()?;
    let date = response.headers().get(http::header::DATE)?.to_str().ok()?;
    jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(date)
        .ok()
}

/// Reads the record; empty when there is none.
pub async fn read(client: &kube::Client, at: &RecordRef) -> Result<RotationView, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &at.namespace);
    Ok(api
        .get_opt(&at.name)
        .await?
        .and_then(|cm| cm.data)
        .map(|data| RotationView::of(&data))
        .unwrap_or_default())
}

/// The breaker's state as the record changes: a watch of the one ConfigMap (by name, so the
/// Role can name it), with kube-runtime's back-off. Each (re-)list answers once, with the
/// record's state or, without a record, not halted; a deleted record reads as not halted.
pub fn watch_halt(
    client: kube::Client,
    at: &RecordRef,
) -> impl futures::Stream<Item = Result<HaltState, kube::runtime::watcher::Error>> + use<> {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let api: Api<ConfigMap> = Api::namespaced(client, &at.namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", at.name));
    watcher(api, config)
        .watch_backoff()
        // `listed_one`: the list under way has shown the record.
        .scan(false, |listed_one, event| {
            let read = match event {
                Ok(watcher::Event::Init) => {
                    *listed_one = false;
                    None
                }
                Ok(watcher::Event::InitApply(cm)) => {
                    *listed_one = true;
                    Some(Ok(halt_from_data(&cm.data.unwrap_or_default())))
                }
                Ok(watcher::Event::InitDone) => (!*listed_one).then(|| Ok(HaltState::default())),
                Ok(watcher::Event::Apply(cm)) => {
                    Some(Ok(halt_from_data(&cm.data.unwrap_or_default())))
                }
                Ok(watcher::Event::Delete(_)) => Some(Ok(HaltState::default())),
                Err(e) => Some(Err(e)),
            };
            futures::future::ready(Some(read))
        })
        .filter_map(futures::future::ready)
}
