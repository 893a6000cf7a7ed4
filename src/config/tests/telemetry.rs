//! `[telemetry]`: absent it is off; present it needs a collector URL, and each mistake is
//! reported at its key path.

use super::{error_at, errors, load, with_route};

#[test]
fn absent_is_off_and_present_has_defaults() {
    assert!(load(&with_route("")).telemetry.is_none());
    let config = load(&with_route(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318/\"",
    ));
    let t = config.telemetry.unwrap();
    assert_eq!(t.sample_ratio, 1.0);
    assert_eq!(t.service_name, "switchyard");
    assert_eq!(t.traces_url(), "http://127.0.0.1:4318/v1/traces");
    let config = load(&with_route(
        "[telemetry]\notlp_endpoint = \"https://otel.internal/base\"\nsample_ratio = 0.25\nservice_name = \"gw-eu\"",
    ));
    let t = config.telemetry.unwrap();
    assert_eq!(t.sample_ratio, 0.25);
    assert_eq!(t.service_name, "gw-eu");
    assert_eq!(t.traces_url(), "https://otel.internal/base/v1/traces");
}

#[test]
fn mistakes_are_reported_at_their_key_paths() {
    let e = errors(&with_route("[telemetry]\nsample_ratio = 0.5"));
    error_at(&e, "telemetry.otlp_endpoint", "required");
    for bad in [
        "127.0.0.1:4318",
        "grpc://collector:4317",
        "http://",
        "http://h/?x=1",
    ] {
        let e = errors(&with_route(&format!(
            "[telemetry]\notlp_endpoint = \"{bad}\""
        )));
        error_at(&e, "telemetry.otlp_endpoint", "http:// or https://");
    }
    let e = errors(&with_route(
        "[telemetry]\notlp_endpoint = \"http://c:4318\"\nsample_ratio = 1.5\nservice_name = \"\"",
    ));
    error_at(&e, "telemetry.sample_ratio", "between 0 and 1");
    error_at(&e, "telemetry.service_name", "1 to 128");
    let e = errors(&with_route(
        "[telemetry]\notlp_endpoint = \"http://c:4318\"\nsampling = 1.0",
    ));
    error_at(&e, "telemetry.sampling", "unknown field");
}
