//! Properties of [`HttpTarget`] parsing, the URLs an operator gives as flags (issue 18): any
//! text is a target or a refusal, and neither a target as shown nor a refusal ever quotes the
//! credentials a URL may carry (its user information and its query). Each runs
//! `PROPTEST_CASES` cases (256 by default); failures found so far are replayed first from
//! `proptest-regressions/http/fuzz.txt`.

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;

/// Pieces of URLs and what breaks them.
const TOKENS: &[&str] = &[
    "http",
    "https",
    "ftp",
    "://",
    ":",
    "/",
    "//",
    "@",
    "?",
    "#",
    "%",
    "%40",
    "%zz",
    "[",
    "]",
    "::1",
    "host",
    "prom.example",
    "9090",
    "99999",
    "user",
    "token=abc",
    "&",
    " ",
    "é",
    "\u{0}",
];

fn token_soup() -> impl Strategy<Value = String> {
    vec(prop::sample::select(TOKENS), 0..12).prop_map(|tokens| tokens.concat())
}

/// Marks the secret parts, so a property can look for them in what is shown.
const PASSWORD: &str = "Pw9x";
const TOKEN: &str = "Tk7q";

/// A URL with a password (which may hold characters a URL reserves: an operator who did not
/// percent-encode it) and a token in its query.
fn url_with_credentials() -> impl Strategy<Value = String> {
    let password_tail = vec(
        prop::sample::select(vec![
            "a", "1", "?", "#", "/", "@", ":", "%", "%3F", " ", "[", "é",
        ]),
        0..4,
    )
    .prop_map(|v| v.concat());
    (
        prop::sample::select(vec!["http://", "https://", "ftp://", ""]),
        prop::sample::select(vec!["ops", "", "o p"]),
        password_tail,
        prop::sample::select(vec![
            "prom.example",
            "10.0.0.1:9090",
            "[::1]:80",
            "",
            "ho st",
        ]),
        prop::sample::select(vec!["", "/", "/prom/", "/a?b"]),
        prop::sample::select(vec!["", "?token=", "?a=1&token=", "?email=a@b&token="]),
    )
        .prop_map(|(scheme, user, tail, host, path, query)| {
            let query = if query.is_empty() {
                String::new()
            } else {
                format!("{query}{TOKEN}")
            };
            format!("{scheme}{user}:{PASSWORD}{tail}@{host}{path}{query}")
        })
}

proptest! {
    /// Any text is a target or a refusal, never a panic; a target's request URL, shown form and
    /// origin are built without a panic, and a path and query can be added to it.
    #[test]
    fn parse_never_panics(
        input in prop_oneof![any::<String>(), token_soup(), url_with_credentials()],
        query in vec((any::<String>(), any::<String>()), 0..3),
    ) {
        let Ok(target) = input.parse::<HttpTarget>() else {
            return Ok(());
        };
        let uri = target.uri();
        prop_assert_eq!(uri.scheme(), Some(&target.scheme));
        let _ = (target.shown(), target.origin());
        let pairs: Vec<(&str, &str)> =
            query.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let joined = target.with_path_and_query("/api/v1/query", &pairs);
        let _ = joined.uri();
        // The base's own query goes first, as it was.
        if let Some(base) = target.path_and_query.query().filter(|q| !q.is_empty()) {
            prop_assert!(joined.path_and_query.query().unwrap().starts_with(base));
        }
    }

    /// A target is never shown with its password or its query, and a refusal never quotes
    /// them, however the URL is broken.
    #[test]
    fn credentials_are_never_shown(input in url_with_credentials()) {
        let shown = match input.parse::<HttpTarget>() {
            Ok(target) => {
                prop_assert!(target.basic_auth.as_deref().unwrap_or_default().contains(PASSWORD));
                format!("{} {} {target:?}", target.shown(), target.origin())
            }
            Err(e) => e.to_string(),
        };
        prop_assert!(!shown.contains(PASSWORD), "{input:?} shown as {shown:?}");
        prop_assert!(!shown.contains(TOKEN), "{input:?} shown as {shown:?}");
    }

    /// Percent-decoding the user information never panics, whatever bytes follow a `%`.
    #[test]
    fn percent_decoding_never_panics(input in prop_oneof![any::<String>(), token_soup()]) {
        let decoded = percent_decode(&input);
        if !input.contains('%') {
            prop_assert_eq!(decoded, input);
        }
    }
}
