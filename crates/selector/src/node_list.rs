//! Listing the nodes a run considers: paged, sorted by name, and slimmed of what no decision
//! needs. Every provider judges the same list, so listing is the run's job, not a provider's.

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, ListParams};

use crate::api_calls::ApiCalls;
use crate::kube_retry::retry_transient;

/// Page size for listing nodes (what kubectl and kube's watchers use).
pub const LIST_PAGE_SIZE: u32 = 500;

/// Lists the nodes matching `selector` (all when `None`), in pages of [`LIST_PAGE_SIZE`], sorted
/// by name. What no decision needs (`managedFields`, `status.images`) is dropped as pages
/// arrive: on large clusters those are most of a Node's size.
pub async fn list_nodes(
    client: &Client,
    selector: Option<&str>,
    calls: &mut ApiCalls,
) -> Result<Vec<Node>, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let mut params = ListParams::default().limit(LIST_PAGE_SIZE);
    if let Some(selector) = selector {
        params = params.labels(selector);
    }
    let mut nodes = Vec::new();
    loop {
        calls.kube("list nodes");
        let page = retry_transient("list nodes", || api.list(&params)).await?;
        nodes.extend(page.items.into_iter().map(slim));
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(nodes)
}

/// The node without what no decision needs.
pub fn slim(mut node: Node) -> Node {
    node.metadata.managed_fields = None;
    if let Some(status) = node.status.as_mut() {
        status.images = None;
    }
    node
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn slim_drops_what_no_decision_needs() {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "ip-10-0-1-23.ec2.internal",
                "managedFields": [{"manager": "kubelet", "operation": "Update"}],
            },
            "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"},
            "status": {"images": [{"names": ["a"], "sizeBytes": 1}]},
        }))
        .unwrap();
        let n = slim(node);
        assert_eq!(n.metadata.managed_fields, None);
        assert_eq!(n.status.unwrap().images, None);
        assert_eq!(
            n.spec.unwrap().provider_id.as_deref(),
            Some("aws:///us-east-1a/i-0123456789abcdef0")
        );
    }
}
