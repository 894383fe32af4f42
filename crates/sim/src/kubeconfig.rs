//! The kubeconfig the simulator writes for `kubectl` and kube clients, and its admin token.

use std::path::Path;

/// The token of the kubeconfig the simulator always writes: without a policy no token is
/// checked; with one, this token is the cluster admin's and may do everything.
pub const ADMIN_TOKEN: &str = "rotor-sim-no-auth";

/// A kubeconfig with one cluster, user and context named `rotor-sim`, accepted by kubectl and
/// kube::Config alike, authenticating with [`ADMIN_TOKEN`].
pub fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: rotor-sim\n  cluster:\n    server: {url}\ncontexts:\n- name: rotor-sim\n  context:\n    cluster: rotor-sim\n    user: rotor-sim\n    namespace: default\ncurrent-context: rotor-sim\nusers:\n- name: rotor-sim\n  user:\n    token: {ADMIN_TOKEN}\npreferences: {{}}\n"
    )
}

pub fn write_kubeconfig(path: &Path, url: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, kubeconfig_yaml(url))
}
