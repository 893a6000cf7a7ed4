//! The command line as a user runs it (the built binary): `check` refuses what `serve`
//! refuses, and no command panics when its reader goes away.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

/// A config file in a temporary directory, removed on drop.
struct ConfigFile {
    dir: std::path::PathBuf,
}

impl ConfigFile {
    fn new(text: &str) -> ConfigFile {
        let dir = std::env::temp_dir().join(format!(
            "switchyard-cli-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("switchyard.toml"), text).unwrap();
        ConfigFile { dir }
    }

    fn path(&self) -> String {
        self.dir.join("switchyard.toml").display().to_string()
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn switchyard() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    cmd.env("RUST_LOG", "error");
    cmd
}

/// Run `switchyard COMMAND -c FILE` with `TEST_KEY` set to `key`.
fn run(command: &str, file: &ConfigFile, key: &str) -> Output {
    switchyard()
        .args([command, "-c", &file.path()])
        .env("TEST_KEY", key)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// One provider `p` of `kind` and one route `r` on it.
fn one_route(kind: &str, model: &str, extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[audit]\nstore = \"off\"\n\
         [[providers]]\nname = \"p\"\nkind = \"{kind}\"\nbase_url = \"http://127.0.0.1:9\"\napi_key = \"${{TEST_KEY}}\"\n\
         [[routes]]\nname = \"r\"\ntargets = [{{ provider = \"p\", model = \"{model}\" }}]\n{extra}"
    )
}

/// What `serve` refuses `check` refuses, with the same exit status (64, a config error) and
/// the same reason: a key no HTTP header can carry (`serve` could not build its provider), a
/// model name no URL can carry (Gemini puts it in the path). Before, `check` called both
/// valid, and only `serve` failed.
#[test]
fn check_refuses_what_serve_refuses() {
    for (what, toml, key, needle) in [
        (
            "a key ending in a newline",
            one_route("openai", "gpt-4o", ""),
            "sk-test-secret\n",
            "providers[0].api_key: api_key contains a character not allowed in an HTTP header",
        ),
        (
            "a gemini model with a space",
            one_route("gemini", "gemini pro", ""),
            "sk-test-secret",
            "provider p: bad URL",
        ),
    ] {
        let file = ConfigFile::new(&toml);
        let check = run("check", &file, key);
        let stderr = String::from_utf8_lossy(&check.stderr);
        assert_eq!(check.status.code(), Some(64), "check, {what}: {stderr}");
        assert!(stderr.contains(needle), "check, {what}: {stderr}");
        assert!(!stderr.contains("sk-test-secret"), "{stderr}");
        assert!(check.stdout.is_empty(), "{what}");
        let serve = run("serve", &file, key);
        let served = String::from_utf8_lossy(&serve.stderr);
        assert_eq!(serve.status.code(), Some(64), "serve, {what}: {served}");
        assert!(served.contains(needle), "serve, {what}: {served}");
    }
    // And what serve takes, check takes.
    let file = ConfigFile::new(&one_route("gemini", "gemini-2.5-pro", ""));
    let check = run("check", &file, "sk-test-secret");
    assert!(check.status.success(), "{check:?}");
    assert!(String::from_utf8_lossy(&check.stdout).contains("is valid"));
}

/// A duration too long to mean anything (or to add to a clock reading) fails `check`, naming
/// the key path and the limit, instead of making every request panic once served.
#[test]
fn check_refuses_absurd_durations_naming_the_key_and_the_limit() {
    let file = ConfigFile::new(&one_route(
        "openai",
        "gpt-4o",
        "[routes.failover]\nattempt_timeout = \"99999999999999999s\"\nrequest_timeout = \"99999999999999999s\"",
    ));
    let out = run("check", &file, "sk-test-secret");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    for key in ["attempt_timeout", "request_timeout"] {
        assert!(
            stderr.contains(&format!(
                "routes[0].failover.{key}: `99999999999999999s` is too long: the limit for this key is 365d"
            )),
            "{stderr}"
        );
    }
}

/// `switchyard check | head -1`: the reader takes a line and goes away while `check` still
/// writes (the table is larger than a pipe holds, so the write must wait for the reader and
/// then fails). The process ends quietly with 141 (128 + SIGPIPE, as a shell reports a tool a
/// closed pipe stopped), not with a panic (101) from `println!`.
#[test]
fn check_into_a_closed_pipe_exits_quietly() {
    let mut toml = one_route("openai", "gpt-4o", "");
    for i in 0..400 {
        toml += &format!(
            "[[routes]]\nname = \"route-{i}\"\ntargets = [{{ provider = \"p\", model = \"m-{i}\" }}]\n"
        );
    }
    let file = ConfigFile::new(&toml);
    let mut child = switchyard()
        .args(["check", "-c", &file.path()])
        .env("TEST_KEY", "sk-test-secret")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("is valid"), "{first}");
    // The reader is dropped here: the pipe's read end is closed.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(stderr.is_empty(), "quietly: {stderr}");
}
