//! SIGTERM cancels the shutdown token. Its own test binary, so the signal reaches no other test.

use std::time::Duration;

#[tokio::test]
async fn sigterm_cancels_the_token() {
    let token = rotor_core::shutdown_token();
    let clone = token.clone();
    assert!(!token.is_cancelled());

    let status = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());

    tokio::time::timeout(Duration::from_secs(10), clone.cancelled())
        .await
        .expect("token cancelled after SIGTERM");
    assert!(token.is_cancelled());
}
