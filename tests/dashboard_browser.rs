//! The dashboard in a real browser: a gateway with two mocks in this process, light traffic
//! through it, and `tests/browser/dashboard.mjs` driving headless Chromium against
//! `/dashboard` (every target shown; a breaker forced open through the admin API shows as
//! open; the page's buttons work, asking for the admin key the gateway's `[auth]` needs, and
//! again when given a client key; the adaptive route's shares are charted and in each row; the
//! session view lists one conversation's turns from the audit log).
//! The screenshot lands in `target/dashboard.png`.
//!
//! Needs node, Debian's chromium and `npm ci` in `tests/browser`. Without them the test is
//! skipped with a loud message, except under CI (`CI` set), where that is a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;
use switchyard::mock::FaultPlan;

/// The client key of the gateway's `[auth]` (see `with_client_key`), for the traffic.
const KEY: &str = "sk-test-secret";
/// The session a share of the traffic belongs to, for the page's session view.
const SESSION: &str = "dash-session-1";

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// What is missing to run the browser test, if anything.
fn missing() -> Option<String> {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !node.is_ok_and(|s| s.success()) {
        return Some("node is not installed".into());
    }
    if !Path::new(&chromium).exists() {
        return Some(format!(
            "{chromium} does not exist (apt-get install chromium chromium-driver)"
        ));
    }
    if !browser_dir().join("node_modules/playwright-core").exists() {
        return Some("playwright-core is not installed (npm ci in tests/browser)".into());
    }
    None
}

/// Run the script, killing it if it hangs.
fn run_script(url: &str, screenshot: &Path) -> (bool, String) {
    let mut child = Command::new("node")
        .env("SWITCHYARD_ADMIN_KEY", ADMIN_KEY)
        // Given to the first prompt: refused, the page asks again.
        .env("SWITCHYARD_CLIENT_KEY", KEY)
        .env("SWITCHYARD_SESSION", SESSION)
        .arg(browser_dir().join("dashboard.mjs"))
        .arg(url)
        .arg(screenshot)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start node");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_every_target_and_a_forced_open_breaker() {
    if let Some(why) = missing() {
        if std::env::var_os("CI").is_some() {
            panic!("the browser test cannot run under CI: {why}");
        }
        eprintln!(
            "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
             !! SKIPPED the dashboard browser test: {why}\n\
             !! (under CI, with CI set, this is a failure)\n\
             !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
        );
        return;
    }
    let m = mocks(2).await;
    // Some failovers for the charts and the event list.
    m[0].set_plan(FaultPlan {
        status: Some(503),
        error_rate: 0.1,
        latency_ms: 20,
        ..Default::default()
    });
    // An adaptive route, so the page charts its shares.
    let toml = config(&m, "").replacen(
        "name = \"chat\"\n",
        "name = \"chat\"\nstrategy = \"adaptive\"\n",
        1,
    ) + "\n[routes.adaptive]\naffinity = \"off\"\ninterval = \"1s\"\n";
    // The audit log on, for the session view.
    let store = support::audit::TestStore::sqlite();
    let toml = with_audit(&toml, &store.url(), "");
    // With client and admin keys set: the page's override buttons must ask for an admin key.
    let gw = Gateway::start(&with_admin_key(&with_client_key(&toml))).await;
    let url = gw.url("");
    let traffic_url = gw.url("/v1/chat/completions");
    let traffic = tokio::spawn(async move {
        let client = client();
        for i in 0u32.. {
            let mut req = client
                .post(&traffic_url)
                .bearer_auth(KEY)
                .json(&chat_body(i % 3 == 0));
            if i % 4 == 0 {
                req = req.header("x-switchyard-session", SESSION);
            }
            let _ = req.send().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    // target/tmp is where Cargo lets tests write; the screenshot goes next to it.
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let screenshot = target_dir.join("dashboard.png");
    let script_url = url.clone();
    let shot = screenshot.clone();
    let (ok, output) = tokio::task::spawn_blocking(move || run_script(&script_url, &shot))
        .await
        .unwrap();
    traffic.abort();
    println!("{output}");
    assert!(ok, "the browser test failed:\n{output}");
    assert!(output.contains("screenshot: "), "{output}");
    assert!(
        screenshot.exists(),
        "no screenshot at {}",
        screenshot.display()
    );
    println!("dashboard screenshot: {}", screenshot.display());
    gw.stop().await;
    store.cleanup().await;
}
