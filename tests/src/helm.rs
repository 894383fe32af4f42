//! Helm, built from the Go module pinned in tools/helm by `tools/build.sh` beside the control
//! plane, run on the chart in deploy/helm/rotor with its own empty configuration (no
//! repositories, no cache shared with a person's Helm).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use crate::real_cluster::control_plane_bin;
use crate::{TestDir, describe_output, run_with_timeout, workspace_root};

/// The chart, relative to the workspace root.
pub const CHART: &str = "deploy/helm/rotor";

/// The release name and namespace the tests install and render with (the kustomize base's
/// namespace, so that both render the same objects).
pub const RELEASE: &str = "rotor";
pub const NAMESPACE: &str = "rotor-system";

const HELM_TIMEOUT: Duration = Duration::from_secs(300);

/// The helm binary, or a panic saying how to build it.
pub fn helm_bin() -> PathBuf {
    let helm = control_plane_bin().join("helm");
    assert!(
        helm.is_file(),
        "helm is missing from {}: run `tools/build.sh`, which builds it from tools/helm \
         (a few minutes with the Go module proxy)",
        helm.parent().unwrap_or(&helm).display()
    );
    helm
}

/// `helm <args>`, run from the workspace root with configuration, cache and data directories
/// of its own (empty, removed afterwards: no call sees another's or a person's Helm); the
/// output whatever its status.
pub fn helm(args: &[&str]) -> Output {
    let home = TestDir::new("helm-home");
    run_with_timeout(
        Command::new(helm_bin())
            .args(args)
            .current_dir(workspace_root())
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env_remove("KUBECONFIG"),
        HELM_TIMEOUT,
    )
}

/// [`helm`] that must succeed; its stdout.
pub fn helm_ok(args: &[&str]) -> String {
    let out = helm(args);
    assert!(
        out.status.success(),
        "{}",
        describe_output(&format!("helm {}", args.join(" ")), &out)
    );
    String::from_utf8(out.stdout).expect("helm prints UTF-8")
}

/// `helm template` of the chart as release [`RELEASE`] in [`NAMESPACE`], with the values files
/// `values` (relative to the workspace root) and `extra` arguments.
pub fn template(values: &[&str], extra: &[&str]) -> Output {
    let mut args = vec!["template", RELEASE, CHART, "--namespace", NAMESPACE];
    for file in values {
        args.extend(["--values", file]);
    }
    args.extend_from_slice(extra);
    helm(&args)
}

/// The example values files shipped beside the chart, relative to the workspace root, sorted.
pub fn examples() -> Vec<String> {
    let dir = workspace_root().join(CHART).join("examples");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .map(|n| format!("{CHART}/examples/{n}"))
        .collect();
    files.sort();
    files
}
