//! Names the apiserver makes up: `metadata.generateName` plus a random suffix.

/// The apiserver's alphabet for made-up name parts (no vowels, no ambiguous characters): the
/// generateName suffix and the `pod-template-hash`.
pub const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn random_suffix(len: usize) -> String {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes
        .iter()
        .take(len)
        .map(|b| NAME_ALPHABET[*b as usize % NAME_ALPHABET.len()] as char)
        .collect()
}

pub fn generate_name(prefix: &str) -> String {
    format!("{prefix}{}", random_suffix(5))
}
