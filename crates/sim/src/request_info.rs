//! What an HTTP request addresses, read from its path, query and method as the apiserver's
//! request info reads them: the resource or discovery document, the query parameters, and the
//! verb the apiserver would log and authorize. Pure, below both readers: the API serves the
//! request and the authorizer, which the API consults through the shared state, checks it.

use std::collections::HashMap;

use axum::http::{Method, Uri};

/// Where a request points once its path is parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub plural: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    Resource(Target),
    /// `/api/v1` or `/apis/<g>/<v>`: the resource list.
    ResourceList {
        group: String,
        version: String,
    },
    /// `/apis/<g>`
    Group(String),
    NotFound,
}

/// Parses an API path into what it addresses.
pub fn route(path: &str) -> Route {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g] => return Route::Group(g.to_string()),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::NotFound,
    };
    let t = |ns: Option<&str>, plural: &str, name: Option<&str>, sub: Option<&str>| {
        Route::Resource(Target {
            group: group.to_string(),
            version: version.to_string(),
            namespace: ns.map(str::to_string),
            plural: plural.to_string(),
            name: name.map(str::to_string),
            subresource: sub.map(str::to_string),
        })
    };
    match rest {
        [] => Route::ResourceList {
            group: group.to_string(),
            version: version.to_string(),
        },
        ["namespaces", ns, "status" | "finalize"] if group.is_empty() => {
            t(None, "namespaces", Some(ns), Some(rest[2]))
        }
        ["namespaces", ns, plural] => t(Some(ns), plural, None, None),
        ["namespaces", ns, plural, name] => t(Some(ns), plural, Some(name), None),
        ["namespaces", ns, plural, name, sub] => t(Some(ns), plural, Some(name), Some(sub)),
        [plural] => t(None, plural, None, None),
        [plural, name] => t(None, plural, Some(name), None),
        [plural, name, sub] => t(None, plural, Some(name), Some(sub)),
        _ => Route::NotFound,
    }
}

pub fn query_map(uri: &Uri) -> HashMap<String, String> {
    uri.query().map(url_decode_pairs).unwrap_or_default()
}

fn url_decode_pairs(q: &str) -> HashMap<String, String> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    match u8::from_str_radix(
                        std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"),
                        16,
                    ) {
                        Ok(b) => {
                            out.push(b);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

/// The verb the apiserver would log for a request.
pub fn verb_of(method: &Method, t: &Target, q: &HashMap<String, String>) -> &'static str {
    let watch = q.get("watch").is_some_and(|v| v == "true" || v == "1");
    match (method.as_str(), &t.name) {
        ("GET", None) if watch => "watch",
        ("GET", None) => "list",
        ("GET", Some(_)) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", None) => "deletecollection",
        ("DELETE", Some(_)) => "delete",
        _ => "unknown",
    }
}
