//! The image `tools/image.sh` built works: unpacked from its OCI layout, it holds exactly the
//! files the Dockerfile copies, with the Dockerfile's config, and its binaries run from it with
//! nothing but its own libraries (`chroot` into the unpacked root, as uid/gid 65532, the
//! image's environment only): `--version`, the image's CMD, then against a real control plane
//! the drainer drains a node and the selector plans, each as its ServiceAccount.
//!
//! The image is not built here: run `tools/image.sh` first (`.ci/run` does). The test runs as
//! root (`chroot` needs it), as the build machines do.

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use rotor_e2e::image::{CopyLine, OciImage, built_image, dockerfile, dockerfile_stages};
use rotor_e2e::real_cluster::ROTOR_NAMESPACE;
use rotor_e2e::{
    FakeNode, RealCluster, TestDir, describe_output, run_with_timeout, wait_until, workspace_root,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(180);

/// The image of `tools/image.sh`, unpacked into a scratch directory.
struct Unpacked {
    out: PathBuf,
    image: OciImage,
    root: PathBuf,
    _dir: TestDir,
}

impl Unpacked {
    fn new() -> Unpacked {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(
            euid, 0,
            "the image tests run as root: `chroot`, and unpacking the layer with its owners"
        );
        let out = built_image();
        let image = OciImage::read(&out.join("oci"));
        let dir = TestDir::new("image");
        let root = dir.join("rootfs");
        std::fs::create_dir(&root).expect("create the root");
        image.unpack(&root);
        Unpacked {
            out,
            image,
            root,
            _dir: dir,
        }
    }

    /// `chroot --userspec=65532:65532 <root> <program>` with the image's environment (its
    /// config's `Env`) and nothing else, as a container runtime would start it.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("chroot");
        cmd.arg("--userspec=65532:65532")
            .arg(&self.root)
            .arg(program)
            .env_clear();
        for pair in self.image.config["config"]["Env"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let (k, v) = pair
                .as_str()
                .and_then(|p| p.split_once('='))
                .expect("Env holds K=V");
            cmd.env(k, v);
        }
        cmd
    }

    fn run(&self, program: &str, args: &[&str]) -> Output {
        run_with_timeout(self.command(program).args(args), Duration::from_secs(60))
    }

    /// Puts a kubeconfig of the test cluster (and the CA file it names) into the root under
    /// /etc/rotor, readable by 65532, as a Secret and a ConfigMap would be mounted; returns its
    /// path inside the root.
    fn install_kubeconfig(&self, kubeconfig: &Path, name: &str) -> PathBuf {
        let dir = self.root.join("etc/rotor");
        std::fs::create_dir_all(&dir).expect("create etc/rotor");
        let text = std::fs::read_to_string(kubeconfig).expect("read the kubeconfig");
        let mut rewritten = String::new();
        for line in text.lines() {
            match line.split_once("certificate-authority: ") {
                Some((indent, ca)) => {
                    let inside = "/etc/rotor/ca.crt";
                    copy_readable(Path::new(ca), &self.root.join(&inside[1..]));
                    rewritten.push_str(&format!("{indent}certificate-authority: {inside}\n"));
                }
                None => {
                    rewritten.push_str(line);
                    rewritten.push('\n');
                }
            }
        }
        let path = dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, rewritten).expect("write the kubeconfig");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
            .expect("chmod the kubeconfig");
        PathBuf::from(format!("/etc/rotor/{name}.kubeconfig"))
    }

    /// A `launch` for [`RealCluster::start_rotor_drainer_with`] and
    /// [`RealCluster::run_rotor_selector_with`]: the image's `binary` under chroot.
    fn launch(&self, binary: &str) -> impl FnOnce(&Path) -> (Command, PathBuf) + '_ {
        let binary = binary.to_string();
        move |kubeconfig: &Path| {
            let inside = self.install_kubeconfig(kubeconfig, &binary);
            (self.command(&format!("/usr/local/bin/{binary}")), inside)
        }
    }
}

fn copy_readable(from: &Path, to: &Path) {
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o644)).expect("chmod");
}

fn version() -> String {
    let text = std::fs::read_to_string(workspace_root().join("crates/drainer/Cargo.toml"))
        .expect("crates/drainer/Cargo.toml");
    text.lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("a version")
        .to_string()
}

/// Every path under `root`, as `/a/b`, with its metadata.
fn walk(root: &Path) -> Vec<(String, std::fs::Metadata)> {
    let mut all = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read a directory of the root") {
            let entry = entry.expect("a directory entry");
            let meta = entry.metadata().expect("lstat");
            let path = entry.path();
            let inside = format!(
                "/{}",
                path.strip_prefix(root).expect("under the root").display()
            );
            if meta.is_dir() {
                stack.push(path);
            }
            all.push((inside, meta));
        }
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

#[test]
fn the_image_holds_the_dockerfiles_files_and_config_and_its_binaries_run_on_its_own_libraries() {
    let unpacked = Unpacked::new();
    let image = &unpacked.image;
    let version = version();

    // The digest image.sh printed is the layout's manifest.
    let printed = std::fs::read_to_string(unpacked.out.join("digest")).expect("digest file");
    assert_eq!(printed.trim(), image.digest);
    assert_eq!(image.layers.len(), 1, "{}", image.manifest);

    // The config is the Dockerfile's final stage's.
    let stages = dockerfile_stages(&dockerfile());
    let expected = rotor_e2e::image::dockerfile_config(stages.last().expect("a final stage"))
        .expect("the Dockerfile's config");
    let config = &image.config["config"];
    for key in ["User", "Cmd", "WorkingDir", "Env", "Labels"] {
        assert_eq!(config[key], expected[key], "config {key}: {}", image.config);
    }
    assert_eq!(config["Entrypoint"], Value::Null, "{}", image.config);
    assert_eq!(
        (&image.config["os"], &image.config["architecture"]),
        (&json!("linux"), &json!("amd64"))
    );

    // The `docker load` archive holds the same image under the name deploy/ runs.
    let archive = run_with_timeout(
        Command::new("tar")
            .arg("-xOf")
            .arg(unpacked.out.join("image.tar"))
            .arg("manifest.json"),
        Duration::from_secs(60),
    );
    assert!(
        archive.status.success(),
        "{}",
        describe_output("tar", &archive)
    );
    let archive: Value = serde_json::from_slice(&archive.stdout).expect("manifest.json");
    assert_eq!(
        archive[0]["RepoTags"],
        json!([format!("ghcr.io/rotor-dev/rotor:{version}")])
    );
    let config_digest = image.manifest["config"]["digest"].as_str().unwrap_or("?");
    assert_eq!(archive[0]["Config"], config_digest, "{archive}");

    // Exactly the listed files, owned by root. A directory copy (the time zones) brings its
    // tree; `/out/rootfs/` brings /tmp alone.
    let copies: Vec<CopyLine> = rotor_e2e::image::image_files();
    let file_dests: BTreeSet<String> = copies
        .iter()
        .filter(|c| !c.dest.ends_with('/'))
        .map(|c| c.dest.clone())
        .collect();
    let tree_dests: Vec<String> = copies
        .iter()
        .filter(|c| c.dest.ends_with('/') && c.dest != "/")
        .map(|c| c.dest.clone())
        .collect();
    let mut stray = Vec::new();
    for (path, meta) in walk(&unpacked.root) {
        assert_eq!(
            (meta.uid(), meta.gid()),
            (0, 0),
            "{path} is not owned by 0:0"
        );
        let in_tree = tree_dests
            .iter()
            .any(|t| path.starts_with(t.as_str()) || format!("{path}/") == *t);
        let ancestor = file_dests
            .iter()
            .chain(&tree_dests)
            .any(|d| d.starts_with(&format!("{path}/")));
        let listed = if meta.is_dir() {
            in_tree || ancestor || path == "/tmp"
        } else {
            in_tree || file_dests.contains(&path)
        };
        if !listed {
            stray.push(path);
        }
    }
    assert!(stray.is_empty(), "files the list does not copy: {stray:?}");
    for dest in &file_dests {
        assert!(
            unpacked.root.join(&dest[1..]).is_file(),
            "{dest} is missing from the image"
        );
    }
    assert!(
        unpacked
            .root
            .join("usr/share/zoneinfo/Europe/Berlin")
            .is_file()
    );
    let tmp = std::fs::metadata(unpacked.root.join("tmp")).expect("/tmp");
    assert_eq!(tmp.permissions().mode() & 0o7777, 0o1777, "/tmp's mode");
    assert_eq!(
        std::fs::read_dir(unpacked.root.join("tmp"))
            .expect("/tmp")
            .count(),
        0
    );
    for binary in ["rotor-drainer", "rotor-selector"] {
        let meta =
            std::fs::metadata(unpacked.root.join("usr/local/bin").join(binary)).expect("a binary");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o755, "{binary}'s mode");
    }
    let passwd = std::fs::read_to_string(unpacked.root.join("etc/passwd")).expect("passwd");
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");

    // The binaries start with the image's libraries only, as 65532.
    for binary in ["rotor-drainer", "rotor-selector"] {
        let out = unpacked.run(&format!("/usr/local/bin/{binary}"), &["--version"]);
        assert!(
            out.status.success(),
            "{}",
            describe_output(&format!("chroot {binary} --version"), &out)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("{binary} {version}")
        );
    }
    // The time zones come from the image: a window in Europe/Berlin parses (the run then stops
    // at the kubeconfig that is not there), and no longer does once the zone's file is gone.
    let window = || {
        let out = unpacked.run(
            "/usr/local/bin/rotor-drainer",
            &[
                "--kubeconfig",
                "/nonexistent",
                "run",
                "--window",
                "0 22 * * 1-5 for 4h in Europe/Berlin",
            ],
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let with_zone = window();
    assert!(
        with_zone.contains("cannot read kubeconfig") && !with_zone.contains("time zone"),
        "{with_zone}"
    );
    std::fs::remove_file(unpacked.root.join("usr/share/zoneinfo/Europe/Berlin"))
        .expect("remove Europe/Berlin");
    let without_zone = window();
    assert!(
        without_zone.contains("unknown time zone \"Europe/Berlin\""),
        "{without_zone}"
    );

    // The image's CMD, found on the image's PATH.
    let cmd: Vec<String> = config["Cmd"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(String::from))
        .collect();
    let args: Vec<&str> = cmd[1..].iter().map(String::as_str).collect();
    let out = unpacked.run(&cmd[0], &args);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("Usage:"),
        "{}",
        describe_output(&format!("chroot {}", cmd.join(" ")), &out)
    );
}

#[test]
fn the_images_drainer_drains_a_node_and_its_selector_plans_on_a_real_control_plane() {
    let unpacked = Unpacked::new();
    let cluster = RealCluster::start();
    cluster.apply_kustomize_ok("deploy/overlays/kubernetes");
    cluster.stop_shipped_drainer();
    let old = FakeNode::behind("old-1");
    cluster.add_nodes(&[old]);
    let labels = json!({"app": "web"});
    cluster.apply(
        &json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels},
                                      "spec": {"terminationGracePeriodSeconds": 0,
                                               "containers": [{"name": "app", "image": "app:1"}]}}}})
        .to_string(),
    );
    let pods_on = |node: &str| -> usize {
        cluster.kubectl_json(&[
            "get",
            "pods",
            "-n",
            "default",
            "-l",
            "app=web",
            "--field-selector",
            &format!("spec.nodeName={node},status.phase=Running"),
        ])["items"]
            .as_array()
            .map_or(0, Vec::len)
    };
    wait_until("web's pod to run on old-1", WAIT, || {
        (pods_on("old-1") == 1).then_some(())
    });
    cluster.add_nodes(&[FakeNode::new("new-1")]);

    // The drainer of the image, as the Deployment runs it, with a maintenance window read in
    // a time zone of the image's own database (always open: every minute, for an hour).
    let drainer = cluster.start_rotor_drainer_with(
        "image",
        &["--window", "* * * * * for 1h in Europe/Berlin"],
        unpacked.launch("rotor-drainer"),
    );
    cluster.kubectl_ok(&[
        "taint",
        "node",
        "old-1",
        "rotor.dev/drain=manual:NoSchedule",
    ]);
    wait_until("old-1 to reach phase drained", WAIT, || {
        let node = cluster.kubectl_json(&["get", "node", "old-1"]);
        (node["metadata"]["annotations"]["rotor.dev/phase"] == "drained").then_some(())
    });
    wait_until("web's pod to run on new-1", WAIT, || {
        (pods_on("new-1") == 1).then_some(())
    });
    // It ran as 65532 in the unpacked root.
    let pid = drainer.pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    assert!(
        status.lines().any(|l| l
            .split_whitespace()
            .eq(["Uid:", "65532", "65532", "65532", "65532"])),
        "{status}"
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/root")).expect("its root"),
        unpacked.root.canonicalize().expect("the root")
    );
    drop(drainer);
    let user = format!("system:serviceaccount:{ROTOR_NAMESPACE}:rotor-drainer");
    let evictions = cluster
        .audit_by(&user)
        .into_iter()
        .filter(|e| {
            e["objectRef"]["subresource"] == "eviction" && e["responseStatus"]["code"] == 201
        })
        .count();
    assert_eq!(
        evictions, 1,
        "the drainer evicted web's pod through the API"
    );
    assert_eq!(cluster.refusals(&user, 0), Vec::<String>::new());

    // The selector of the image plans (a dry run) for a node whose kubelet is behind.
    let behind = FakeNode::behind("behind-1");
    cluster.add_nodes(&[behind]);
    let out = cluster.run_rotor_selector_with(
        &["--provider", "kubernetes", "--dry-run"],
        unpacked.launch("rotor-selector"),
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("behind-1"),
        "{}",
        describe_output("the image's rotor-selector --dry-run", &out)
    );
    let node = cluster.kubectl_json(&["get", "node", "behind-1"]);
    assert_eq!(
        node["spec"]["taints"],
        Value::Null,
        "a dry run taints nothing"
    );
    assert_eq!(
        cluster.refusals(
            &format!("system:serviceaccount:{ROTOR_NAMESPACE}:rotor-selector"),
            0
        ),
        Vec::<String>::new()
    );
}
