//! `[telemetry]`: where traces go and how many are kept.

use super::Ctx;
use crate::config::file::RawTelemetry;
use crate::config::TelemetryConfig;

/// The `service.name` when none is given.
const DEFAULT_SERVICE_NAME: &str = "switchyard";

pub(super) fn telemetry(ctx: &mut Ctx<'_>, raw: &RawTelemetry) -> TelemetryConfig {
    const HINT: &str =
        "write otlp_endpoint = \"http://127.0.0.1:4318\" (the collector's OTLP/HTTP port; spans go to {otlp_endpoint}/v1/traces)";
    let otlp_endpoint = match &raw.otlp_endpoint {
        None => {
            ctx.error(
                "telemetry.otlp_endpoint",
                "otlp_endpoint is required in [telemetry]",
                HINT,
            );
            String::new()
        }
        Some(raw) => match ctx.text("telemetry.otlp_endpoint", raw) {
            Some(url) if endpoint_ok(&url) => url,
            Some(_) => {
                ctx.error(
                    "telemetry.otlp_endpoint",
                    "not an http:// or https:// URL with a host",
                    HINT,
                );
                String::new()
            }
            None => String::new(),
        },
    };
    let sample_ratio = raw.sample_ratio.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&sample_ratio) {
        ctx.error(
            "telemetry.sample_ratio",
            format!("must be between 0 and 1, got {sample_ratio}"),
            "1.0 traces every request, 0.1 one in ten; a client's sampled traceparent is always traced",
        );
    }
    let service_name = match &raw.service_name {
        None => DEFAULT_SERVICE_NAME.to_owned(),
        Some(raw) => match ctx.text("telemetry.service_name", raw) {
            Some(name) if !name.trim().is_empty() && name.len() <= 128 => name,
            Some(_) => {
                ctx.error(
                    "telemetry.service_name",
                    "must be 1 to 128 characters",
                    "leave it out for \"switchyard\"",
                );
                String::new()
            }
            None => String::new(),
        },
    };
    TelemetryConfig {
        otlp_endpoint,
        sample_ratio: sample_ratio.clamp(0.0, 1.0),
        service_name,
    }
}

/// An absolute `http(s)://host[:port][/path]` URL.
fn endpoint_ok(url: &str) -> bool {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    matches!(uri.scheme_str(), Some("http" | "https"))
        && uri.host().is_some_and(|h| !h.is_empty())
        && uri.query().is_none()
}
