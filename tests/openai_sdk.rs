//! The official OpenAI Python SDK, pointed at the gateway by base URL only, gets its answers
//! from the backup while the primary fails, streamed and not, and raises on a broken stream.
//! `.ci/run` installs the SDK (`pip install openai`). Outside CI the test says it is skipped when
//! the SDK is not importable; under CI (`CI` set) a missing SDK fails it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::*;
use switchyard::mock::{canonical_text, FaultPlan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_rides_through_a_failing_primary() {
    if !python_sdk("openai") {
        return;
    }
    let m = mocks(4).await;
    let mut toml = String::new();
    for (i, mock) in m.iter().enumerate() {
        toml += &format!(
            "[[providers]]\nname = \"p{i}\"\nkind = \"openai\"\nbase_url = \"{}\"\n\n",
            mock.base_url()
        );
    }
    toml += "[[routes]]\nname = \"chat\"\ntargets = [{ provider = \"p0\", model = \"m0\" }, { provider = \"p1\", model = \"m1\" }]\n\n";
    toml += "[[routes]]\nname = \"flaky\"\ntargets = [{ provider = \"p2\", model = \"m2\" }]\n";
    toml += "[routes.failover]\nmid_stream = \"error\"\n\n";
    toml += "[[routes]]\nname = \"continued\"\ntargets = [{ provider = \"p3\", model = \"m3\" }, { provider = \"p1\", model = \"m1\" }]\n";
    let gw = Gateway::start(&toml).await;
    m[0].set_plan(FaultPlan {
        status: Some(503),
        ..Default::default()
    });
    m[2].set_plan(FaultPlan {
        cut_after_chunks: Some(2),
        ..Default::default()
    });
    m[3].set_plan(FaultPlan {
        cut_after_chunks: Some(4),
        ..Default::default()
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/openai_client.py");
    let base = gw.url("/v1");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args([script, &base, "chat", "flaky", "continued"])
            .output()
    })
    .await
    .unwrap()
    .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the SDK script failed:\n{stderr}");
    let got: Value = serde_json::from_slice(&output.stdout).unwrap();
    let whole = canonical_text(12, 0);
    assert_eq!(got["target"], "p1/m1");
    assert_eq!(got["model"], "m1");
    assert_eq!(got["text"], whole.as_str());
    assert_eq!(got["stream_text"], whole.as_str());
    assert_eq!(got["stream_finish"], "stop");
    let broken = got["broken_stream_error"].as_str().unwrap_or_default();
    assert!(broken.contains("incomplete"), "the SDK raised: {broken:?}");
    assert_eq!(m[0].stats().requests, 2, "the primary failed both calls");
    assert_eq!(
        got["continued_text"],
        whole.as_str(),
        "the seam is invisible to the SDK"
    );
    assert_eq!(got["continued_ids"], 1);
    assert_eq!(got["continued_finish"], "stop");
    assert_eq!(
        m[1].stats().requests,
        3,
        "the backup answered both, and continued the third"
    );
    gw.stop().await;
}
