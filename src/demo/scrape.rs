//! The demo watches the gateway the way an operator would: `/metrics` for the counters (the
//! report's failovers, hedges and breaker transitions are differences between two scrapes),
//! `/admin/status` for breaker states, `/admin/events` for what just happened.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::setup::{CHAT_ROUTE, PRIMARY};
use crate::metrics::names;

/// The gateway counters the demo reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Counters {
    /// Every move to another target.
    pub failovers: f64,
    /// Of those, moves straight past an open breaker (no attempt wasted).
    pub failovers_breaker_open: f64,
    /// Breaker transitions by new state.
    pub transitions: BTreeMap<String, f64>,
    /// Hedges started.
    pub hedges_fired: f64,
    /// Hedges that answered first.
    pub hedges_won: f64,
    /// The primary's share of the adaptive route (`switchyard_target_share`) at the scrape.
    pub primary_share: Option<f64>,
}

impl Counters {
    /// Read them from Prometheus text.
    pub(super) fn parse(text: &str) -> Counters {
        let mut c = Counters::default();
        for (name, labels, value) in text.lines().filter_map(parse_line) {
            let label = |key: &str| {
                labels
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.as_str())
            };
            match name {
                names::FAILOVERS => {
                    c.failovers += value;
                    if label("reason") == Some("breaker_open") {
                        c.failovers_breaker_open += value;
                    }
                }
                names::BREAKER_TRANSITIONS => {
                    *c.transitions
                        .entry(label("to").unwrap_or("?").to_owned())
                        .or_default() += value;
                }
                names::HEDGES => match label("outcome") {
                    Some("fired") => c.hedges_fired += value,
                    Some("won") => c.hedges_won += value,
                    _ => {}
                },
                names::TARGET_SHARE
                    if label("route") == Some(CHAT_ROUTE)
                        && label("target").is_some_and(|t| t.starts_with(PRIMARY)) =>
                {
                    c.primary_share = Some(value);
                }
                _ => {}
            }
        }
        c
    }

    /// All breaker transitions.
    pub(super) fn transitions_total(&self) -> f64 {
        self.transitions.values().sum()
    }

    /// What happened between `earlier` and `self`.
    pub(super) fn since(&self, earlier: &Counters) -> Counters {
        let mut transitions = self.transitions.clone();
        for (to, n) in &earlier.transitions {
            *transitions.entry(to.clone()).or_default() -= n;
        }
        Counters {
            failovers: self.failovers - earlier.failovers,
            failovers_breaker_open: self.failovers_breaker_open - earlier.failovers_breaker_open,
            transitions,
            hedges_fired: self.hedges_fired - earlier.hedges_fired,
            hedges_won: self.hedges_won - earlier.hedges_won,
            // Not a difference: the share at the later scrape.
            primary_share: self.primary_share,
        }
    }
}

/// A sample's labels, in order.
type Labels = Vec<(String, String)>;

/// One sample line: name, labels, value. Comments and malformed lines are `None`.
fn parse_line(line: &str) -> Option<(&str, Labels, f64)> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let Some((name, rest)) = series.split_once('{') else {
        return Some((series, Vec::new(), value));
    };
    let mut labels = Vec::new();
    let mut chars = rest.chars();
    loop {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let key = key.trim_start_matches(',').to_owned();
        if key.is_empty() || key == "}" || chars.next() != Some('"') {
            break;
        }
        let mut val = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => val.push(
                    chars
                        .next()
                        .map_or('\\', |e| if e == 'n' { '\n' } else { e }),
                ),
                '"' => break,
                c => val.push(c),
            }
        }
        labels.push((key, val));
    }
    Some((name, labels, value))
}

/// One target in `/admin/status`, as far as the demo cares.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct TargetStatus {
    /// `provider/model`.
    pub target: String,
    /// Its breaker.
    pub breaker: BreakerStatus,
}

/// A target's breaker in `/admin/status`.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct BreakerStatus {
    /// `closed`, `half_open` or `open`.
    pub state: String,
    /// Share of user traffic admitted (below 1 while ramping).
    #[serde(default)]
    pub traffic_share: f64,
}

#[derive(Debug, Deserialize)]
struct Status {
    targets: Vec<TargetStatus>,
}

/// One event from `/admin/events`.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Event {
    /// Sequence number, for `?since=`.
    pub seq: u64,
    /// Unix milliseconds.
    pub time_ms: u64,
    /// `failover`, `breaker` or `hedge`.
    pub kind: String,
    /// The target it is about.
    pub target: String,
    /// The next target, the new breaker state or the hedge outcome.
    pub to: String,
    /// Why.
    pub reason: String,
}

#[derive(Debug, Deserialize)]
struct Events {
    events: Vec<Event>,
}

/// An HTTP view of one gateway.
#[derive(Debug, Clone)]
pub(super) struct Scraper {
    client: reqwest::Client,
    base: String,
}

impl Scraper {
    /// Watch the gateway at `base` (`http://127.0.0.1:PORT`).
    pub(super) fn new(base: &str) -> reqwest::Result<Scraper> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(std::time::Duration::from_secs(5))
            .build()?;
        Ok(Scraper {
            client,
            base: base.to_owned(),
        })
    }

    /// The gateway's base URL.
    pub(super) fn base(&self) -> &str {
        &self.base
    }

    async fn get(&self, path: &str) -> Option<bytes::Bytes> {
        let resp = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .ok()?;
        resp.bytes().await.ok()
    }

    /// The counters now (zeros if the gateway did not answer).
    pub(super) async fn counters(&self) -> Counters {
        match self.get("/metrics").await {
            Some(b) => Counters::parse(&String::from_utf8_lossy(&b)),
            None => Counters::default(),
        }
    }

    /// Breaker states now (empty if the gateway did not answer).
    pub(super) async fn targets(&self) -> Vec<TargetStatus> {
        self.get("/admin/status")
            .await
            .and_then(|b| serde_json::from_slice::<Status>(&b).ok())
            .map(|s| s.targets)
            .unwrap_or_default()
    }

    /// Events after `since`.
    pub(super) async fn events(&self, since: u64) -> Vec<Event> {
        self.get(&format!("/admin/events?since={since}&limit=500"))
            .await
            .and_then(|b| serde_json::from_slice::<Events>(&b).ok())
            .map(|e| e.events)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_counters_it_reports() {
        let text = "# HELP x y\n\
            switchyard_failovers_total{route=\"r\",from=\"a/x\",to=\"b/y\",reason=\"status\"} 3\n\
            switchyard_failovers_total{route=\"r\",from=\"a/x\",to=\"b/y\",reason=\"breaker_open\"} 5\n\
            switchyard_breaker_transitions_total{target=\"a/x\",to=\"open\"} 2\n\
            switchyard_breaker_transitions_total{target=\"a/\\\"q\",to=\"closed\"} 1\n\
            switchyard_hedges_total{route=\"r\",outcome=\"fired\"} 4\n\
            switchyard_hedges_total{route=\"r\",outcome=\"won\"} 3\n\
            switchyard_audit_dropped_total 0\n";
        let c = Counters::parse(text);
        assert_eq!(c.failovers, 8.0);
        assert_eq!(c.failovers_breaker_open, 5.0);
        assert_eq!(c.transitions_total(), 3.0);
        assert_eq!(c.transitions.get("closed"), Some(&1.0));
        assert_eq!((c.hedges_fired, c.hedges_won), (4.0, 3.0));
        let d = c.since(&Counters::default());
        assert_eq!(d, c);
        assert_eq!(c.since(&c).failovers, 0.0);
    }
}
