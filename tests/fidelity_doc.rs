//! docs/FIDELITY.md names, for each thing it says crosses the gateway, the test that checks it:
//! every test it names must exist, so the table cannot go on citing a test that was renamed or
//! removed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

/// The backticked snake_case names in `text` that look like test names (three words or more).
fn cited_tests(text: &str) -> Vec<&str> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.matches('_').count() >= 3
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
        })
        .collect()
}

#[test]
fn every_test_the_fidelity_table_cites_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/FIDELITY.md")).unwrap();
    let mut sources = String::new();
    for dir in ["tests", "src"] {
        let mut stack = vec![root.join(dir)];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() && !path.ends_with("node_modules") {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    sources += &std::fs::read_to_string(&path).unwrap();
                }
            }
        }
    }
    let cited = cited_tests(&doc);
    assert!(cited.len() >= 3, "the table cites its tests: {cited:?}");
    for name in cited {
        assert!(
            sources.contains(&format!("fn {name}(")),
            "docs/FIDELITY.md cites `{name}`, which no test defines"
        );
    }
}
