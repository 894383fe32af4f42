//! The `meta/v1` pieces both the cluster model and the HTTP API speak: the Status an API call
//! fails ([`ApiError`]) or succeeds with, the DeleteOptions a removal carries, and generated
//! names. Below the model, so the model answers as the apiserver does without knowing HTTP.

mod delete_options;
mod names;
mod status;

pub use delete_options::DeleteOptions;
pub use names::{NAME_ALPHABET, generate_name};
pub use status::{ApiError, success_status};
