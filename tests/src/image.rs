//! rotor's container image as files: the Dockerfile, the list of files both it and
//! `tools/image.sh` place in the image (`tools/image-files.txt`), and the image `tools/image.sh`
//! built (an OCI image layout), unpacked into a directory.
//!
//! The image is never built from a test: [`built_image`] finds the one `tools/image.sh` made
//! for the current sources, or fails saying to run it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::{describe_output, run_with_timeout, workspace_root};

/// One COPY instruction of the Dockerfile's final stage (a line of `tools/image-files.txt`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyLine {
    /// `--from=build`: the source is a path of the build stage; otherwise of the repository.
    pub from_build: bool,
    pub src: String,
    pub dest: String,
}

impl std::fmt::Display for CopyLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.from_build {
            write!(f, "--from=build ")?;
        }
        write!(f, "{} {}", self.src, self.dest)
    }
}

/// Parses the words after `COPY` (`--from=build SRC DEST` or `SRC DEST`).
pub fn parse_copy(args: &str) -> Result<CopyLine, String> {
    let words: Vec<&str> = args.split_whitespace().collect();
    match words.as_slice() {
        ["--from=build", src, dest] => Ok(CopyLine {
            from_build: true,
            src: src.to_string(),
            dest: dest.to_string(),
        }),
        [src, dest] if !src.starts_with("--") => Ok(CopyLine {
            from_build: false,
            src: src.to_string(),
            dest: dest.to_string(),
        }),
        _ => Err(format!(
            "`COPY {args}`: expected `--from=build SRC DEST` or `SRC DEST`"
        )),
    }
}

/// The COPY lines of `tools/image-files.txt` (comments and blank lines skipped).
pub fn image_files() -> Vec<CopyLine> {
    let path = workspace_root().join("tools/image-files.txt");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    parse_image_files(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn parse_image_files(text: &str) -> Result<Vec<CopyLine>, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(parse_copy)
        .collect()
}

/// One instruction of a Dockerfile: its keyword (upper case) and the rest, continuation lines
/// joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instruction {
    pub keyword: String,
    pub args: String,
}

/// A Dockerfile's instructions, by stage (each stage starts with its `FROM`). Comment lines
/// (`#`, parser directives included) are skipped, also inside continued instructions.
pub fn dockerfile_stages(text: &str) -> Vec<Vec<Instruction>> {
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head.trim());
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                logical.push(std::mem::take(&mut current));
            }
        }
    }
    if !current.trim().is_empty() {
        logical.push(current);
    }
    let mut stages: Vec<Vec<Instruction>> = Vec::new();
    for line in logical {
        let (keyword, args) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
        let instruction = Instruction {
            keyword: keyword.to_ascii_uppercase(),
            args: args.split_whitespace().collect::<Vec<_>>().join(" "),
        };
        if instruction.keyword == "FROM" || stages.is_empty() {
            stages.push(Vec::new());
        }
        stages.last_mut().expect("a stage").push(instruction);
    }
    stages
}

/// The repository's Dockerfile.
pub fn dockerfile() -> String {
    let path = workspace_root().join("Dockerfile");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The config the Dockerfile's last stage gives its image, as the OCI config's `config`
/// object names it: `User`, `Cmd` (JSON form), `WorkingDir`, `Env` (`ENV K=V` in order) and
/// `Labels` (`LABEL k="v" ...`).
pub fn dockerfile_config(final_stage: &[Instruction]) -> Result<Value, String> {
    let mut config = serde_json::Map::new();
    let mut env = Vec::new();
    let mut labels = serde_json::Map::new();
    for i in final_stage {
        match i.keyword.as_str() {
            "USER" => {
                config.insert("User".into(), Value::String(i.args.clone()));
            }
            "WORKDIR" => {
                config.insert("WorkingDir".into(), Value::String(i.args.clone()));
            }
            "CMD" => {
                let cmd: Value = serde_json::from_str(&i.args)
                    .map_err(|e| format!("CMD {} is not the JSON form: {e}", i.args))?;
                config.insert("Cmd".into(), cmd);
            }
            "ENV" => {
                for pair in i.args.split_whitespace() {
                    if !pair.contains('=') {
                        return Err(format!("ENV {}: write ENV KEY=VALUE", i.args));
                    }
                    env.push(Value::String(pair.to_string()));
                }
            }
            "LABEL" => {
                for pair in i.args.split_whitespace() {
                    let (k, v) = pair
                        .split_once('=')
                        .ok_or_else(|| format!("LABEL {}: write LABEL key=\"value\"", i.args))?;
                    labels.insert(
                        k.to_string(),
                        Value::String(v.trim_matches('"').to_string()),
                    );
                }
            }
            _ => {}
        }
    }
    config.insert("Env".into(), Value::Array(env));
    config.insert("Labels".into(), Value::Object(labels));
    Ok(Value::Object(config))
}

/// The output directory of `tools/image.sh` for the current sources, or a panic saying to run
/// it. (Never built from here: a release build of both binaries takes minutes.)
///
/// `ROTOR_IMAGE_DIR` wins: an output directory of `tools/image.sh` to test, whatever sources it
/// was built from.
pub fn built_image() -> PathBuf {
    if let Some(dir) = std::env::var_os("ROTOR_IMAGE_DIR") {
        let dir = PathBuf::from(dir);
        assert!(
            dir.join("oci/index.json").is_file(),
            "ROTOR_IMAGE_DIR={} holds no image (oci/index.json): point it at a directory \
             tools/image.sh printed, or unset it and run tools/image.sh",
            dir.display()
        );
        return dir;
    }
    crate::real_cluster::built_by("tools/image.sh").unwrap_or_else(|| {
        panic!(
            "rotor's image is not built for the current sources: run tools/image.sh (a release \
             build: up to half an hour cold on 2 cores, seconds once cached); `.ci/run` runs it \
             before the tests"
        )
    })
}

/// The image of an OCI image layout: its manifest, its config, and its layer blobs (in order),
/// each blob's sha256 checked against its digest.
pub struct OciImage {
    pub digest: String,
    pub manifest: Value,
    pub config: Value,
    /// (media type, path of the blob)
    pub layers: Vec<(String, PathBuf)>,
}

fn blob_path(layout: &Path, digest: &str) -> PathBuf {
    let hex = digest
        .strip_prefix("sha256:")
        .unwrap_or_else(|| panic!("digest {digest} is not sha256"));
    layout.join("blobs/sha256").join(hex)
}

/// `sha256sum` of a file, as `sha256:<hex>`.
pub fn sha256_of(path: &Path) -> String {
    let out = run_with_timeout(Command::new("sha256sum").arg(path), Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}",
        describe_output("sha256sum", &out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    format!(
        "sha256:{}",
        text.split_whitespace().next().unwrap_or_default()
    )
}

/// Reads a blob named by `descriptor` (`digest`, `size`), checking both.
fn read_blob(layout: &Path, descriptor: &Value) -> PathBuf {
    let digest = descriptor["digest"]
        .as_str()
        .expect("a descriptor has a digest");
    let path = blob_path(layout, digest);
    let size = std::fs::metadata(&path)
        .unwrap_or_else(|e| panic!("blob {digest} missing from {}: {e}", layout.display()))
        .len();
    assert_eq!(
        Some(size),
        descriptor["size"].as_u64(),
        "blob {digest}: size differs from its descriptor"
    );
    assert_eq!(
        sha256_of(&path),
        digest,
        "blob {} is corrupt",
        path.display()
    );
    path
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

impl OciImage {
    /// The one image of the layout at `layout` (its `index.json` names exactly one manifest).
    pub fn read(layout: &Path) -> OciImage {
        let index = read_json(&layout.join("index.json"));
        let manifests = index["manifests"].as_array().cloned().unwrap_or_default();
        assert_eq!(
            manifests.len(),
            1,
            "{}: expected one manifest in index.json: {index}",
            layout.display()
        );
        let descriptor = &manifests[0];
        assert_eq!(
            descriptor["mediaType"], "application/vnd.oci.image.manifest.v1+json",
            "{index}"
        );
        let digest = descriptor["digest"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let manifest = read_json(&read_blob(layout, descriptor));
        let config = read_json(&read_blob(layout, &manifest["config"]));
        let layers = manifest["layers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| {
                (
                    l["mediaType"].as_str().unwrap_or_default().to_string(),
                    read_blob(layout, l),
                )
            })
            .collect();
        OciImage {
            digest,
            manifest,
            config,
            layers,
        }
    }

    /// The names in a layer's tar, as GNU tar lists them, and whether the layer is gzipped.
    fn layer_names(media_type: &str, blob: &Path) -> (Vec<String>, bool) {
        let gzip = match media_type {
            "application/vnd.oci.image.layer.v1.tar+gzip" => true,
            "application/vnd.oci.image.layer.v1.tar" => false,
            other => panic!("layer {} has media type {other}", blob.display()),
        };
        let list = run_with_timeout(
            Command::new("tar")
                .arg(if gzip { "-tzf" } else { "-tf" })
                .arg(blob),
            Duration::from_secs(120),
        );
        assert!(
            list.status.success(),
            "{}",
            describe_output("tar -t", &list)
        );
        let names = String::from_utf8_lossy(&list.stdout)
            .lines()
            .map(String::from)
            .collect();
        (names, gzip)
    }

    /// The contents of the regular file at `path` (absolute, as in the image), from the last
    /// layer that has it; `None` if none does. Read with GNU tar from the layer blob, without
    /// unpacking anything else (no root needed).
    pub fn read_file(&self, path: &str) -> Option<Vec<u8>> {
        let wanted = path.trim_start_matches('/');
        let mut found = None;
        for (media_type, blob) in &self.layers {
            let (names, gzip) = Self::layer_names(media_type, blob);
            let Some(name) = names.iter().find(|n| n.trim_start_matches("./") == wanted) else {
                continue;
            };
            let out = run_with_timeout(
                Command::new("tar")
                    .arg(if gzip { "-xzOf" } else { "-xOf" })
                    .arg(blob)
                    .arg(name),
                Duration::from_secs(120),
            );
            assert!(out.status.success(), "{}", describe_output("tar -xO", &out));
            found = Some(out.stdout);
        }
        found
    }

    /// Extracts the layers in order into `root` with GNU tar (as root: owners and modes as
    /// recorded). A whiteout (`.wh.` entry) fails: this image is one layer on an empty base.
    pub fn unpack(&self, root: &Path) {
        for (media_type, blob) in &self.layers {
            let (names, gzip) = Self::layer_names(media_type, blob);
            let whiteouts: Vec<&String> = names.iter().filter(|n| n.contains(".wh.")).collect();
            assert!(whiteouts.is_empty(), "whiteouts in a layer: {whiteouts:?}");
            let out = run_with_timeout(
                Command::new("tar")
                    .arg(if gzip { "-xzf" } else { "-xf" })
                    .arg(blob)
                    .arg("--same-owner")
                    .arg("--same-permissions")
                    .arg("-C")
                    .arg(root),
                Duration::from_secs(120),
            );
            assert!(out.status.success(), "{}", describe_output("tar -x", &out));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dockerfile_instructions_by_stage_with_continuations_and_comments() {
        let text = "# syntax=docker/dockerfile:1\n\
                    FROM rust:1.95-bookworm AS build\n\
                    RUN a \\\n    # a comment inside\n    && b\n\n\
                    FROM scratch\n\
                    COPY --from=build /out/x /usr/local/bin/x\n\
                    LABEL a=\"1\" \\\n      b=\"two\"\n\
                    ENV PATH=/bin\n\
                    USER 65532:65532\n\
                    CMD [\"x\", \"--help\"]\n";
        let stages = dockerfile_stages(text);
        assert_eq!(stages.len(), 2);
        assert_eq!(stages[0][1].args, "a && b");
        assert_eq!(
            parse_copy(&stages[1][1].args),
            Ok(CopyLine {
                from_build: true,
                src: "/out/x".into(),
                dest: "/usr/local/bin/x".into()
            })
        );
        let config = dockerfile_config(&stages[1]).unwrap();
        assert_eq!(
            config,
            serde_json::json!({"User": "65532:65532", "Cmd": ["x", "--help"],
                               "Env": ["PATH=/bin"], "Labels": {"a": "1", "b": "two"}})
        );
        assert!(parse_copy("--from=other a b").is_err());
        assert!(parse_copy("a b c").is_err());
        assert_eq!(
            parse_image_files("# c\n\ntools/f /etc/f\n").unwrap()[0].to_string(),
            "tools/f /etc/f"
        );
    }
}
