//! Replicas sharing breaker state through Redis (`[cluster] redis`), so that one replica's view
//! of an outage protects all.
//!
//! Nothing on the request path touches Redis: a sync task runs once a second (and at once when
//! a breaker here changes state). Each round, in one atomic pipeline, it
//! - writes this replica's counts per target (requests and failures over the breaker window and
//!   the last few seconds) under its own key, and refreshes its entry in the replica set;
//! - writes the states its breakers decided since the last round (a trip, a failed test, a
//!   recovery, an operator's action), one field per target, newest wins;
//! - reads the live replicas and every target's state;
//!
//! then reads the other replicas' counts, hands each breaker the states it has not seen and
//! the others' counts (`routing::breaker::{Adopt, Remote}`): a breaker trips on the cluster's
//! failure share, and a state decided elsewhere is taken over (reason `cluster`).
//!
//! Counts are tagged with the generation (the time of the newest state record) they were
//! counted under, and only counts of the current generation are summed: failures seen before a
//! breaker closed never trip it again elsewhere.
//!
//! When Redis is slow or down, a round times out; the replica carries on with its own windows
//! (the others' counts are dropped after [`STALE`]), says so in `/admin/status` and the log,
//! keeps its unpublished states, and publishes them when Redis is back. Replicas' clocks are
//! taken to agree (NTP): an open state's hold is published as a wall time.

pub mod record;
mod shares;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::clock::wall_ms;
use crate::config::{redact_url, ClusterConfig};
use crate::metrics::names;
use crate::routing::breaker::Remote;
use crate::routing::Shared;
use record::{decode_counts, encode_counts, StateRecord};

/// How often replicas sync.
pub const SYNC_EVERY: Duration = Duration::from_secs(1);
/// A round that takes longer than this failed (Redis is slow or down).
const ROUND_TIMEOUT: Duration = Duration::from_millis(800);
/// A replica that has not synced for this long is gone, and its counts with it; with no
/// successful round for this long, this replica drops the others' counts.
pub const STALE: Duration = Duration::from_secs(5);

/// The cluster link of this replica, for `/admin/status`.
#[derive(Debug)]
pub struct Cluster {
    replica: String,
    redis: String,
    prefix: String,
    status: Mutex<Status>,
}

#[derive(Debug, Default)]
struct Status {
    connected: bool,
    replicas: usize,
    last_sync: Option<Instant>,
    error: Option<String>,
    rounds: u64,
    failed_rounds: u64,
    /// The breakers decide on this replica's counts alone (no round has succeeded yet, or
    /// none for [`STALE`]).
    local_only: bool,
}

impl Cluster {
    /// The link for `config`, under a fresh replica id.
    pub fn new(config: &ClusterConfig) -> Cluster {
        Cluster {
            replica: format!("{:016x}", fastrand::u64(..)),
            redis: config.redis.clone(),
            prefix: config.key_prefix.clone(),
            status: Mutex::new(Status {
                local_only: true,
                ..Status::default()
            }),
        }
    }

    /// This replica's id in the cluster.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    fn status(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `/admin/status`'s `cluster` object.
    pub fn status_json(&self, now: Instant) -> Value {
        let s = self.status();
        json!({
            "redis": redact_url(&self.redis),
            "replica": self.replica,
            "connected": s.connected,
            "replicas": s.replicas,
            "last_sync_ms_ago": s.last_sync.map(|t| now.saturating_duration_since(t).as_millis() as u64),
            "error": s.error,
            "rounds": s.rounds,
            "failed_rounds": s.failed_rounds,
            "windows": if s.local_only { "local" } else { "cluster" },
        })
    }

    fn key(&self, what: &str) -> String {
        format!("{}:{what}", self.prefix)
    }
}

/// What the sync remembers of a target between rounds.
#[derive(Debug, Default)]
struct Seen {
    /// The time of the target's stored state record (0: none): this replica's counts are
    /// published under it, and only the others' counts under it are summed.
    generation: u64,
    /// The last record of another replica taken over (its time and origin), so that it is
    /// taken over once.
    applied: Option<(u64, String)>,
}

/// Sync with the cluster until dropped. Owned by `app::serve`.
pub async fn run(cluster: Arc<Cluster>, shared: Arc<Shared>) {
    let client = match redis::Client::open(cluster.redis.as_str()) {
        Ok(c) => c,
        Err(e) => {
            let msg = format!("cluster: invalid redis URL: {e}");
            tracing::error!(redis = %redact_url(&cluster.redis), "{msg}");
            cluster.status().error = Some(msg);
            return;
        }
    };
    let mut sync = Sync {
        connected: shared.metrics.gauge(names::CLUSTER_CONNECTED, &[]),
        failures: shared.metrics.counter(names::CLUSTER_SYNC_FAILURES, &[]),
        cluster,
        shared,
        client,
        conn: None,
        seen: HashMap::new(),
        unpublished: HashMap::new(),
    };
    let mut tick = tokio::time::interval(SYNC_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let publish = sync.shared.publish.clone();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = publish.notified() => {}
        }
        sync.round().await;
    }
}

struct Sync {
    cluster: Arc<Cluster>,
    shared: Arc<Shared>,
    client: redis::Client,
    conn: Option<MultiplexedConnection>,
    seen: HashMap<String, Seen>,
    /// States decided here and not yet written (kept across failed rounds).
    unpublished: HashMap<String, StateRecord>,
    /// `switchyard_cluster_connected`, `switchyard_cluster_sync_failures_total`.
    connected: Arc<AtomicI64>,
    failures: Arc<AtomicU64>,
}

/// `HSET KEYS[1] ARGV[1] ARGV[3]` unless the field holds a record decided at or after
/// `ARGV[2]` (a record starts with its time; a malformed one counts as older).
const SET_IF_NEWER: &str = "local cur = redis.call('HGET', KEYS[1], ARGV[1]) \
    local t = cur and tonumber(string.match(cur, '^%d+')) \
    if (not t) or t < tonumber(ARGV[2]) then \
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end return 0";

/// What the first pipeline of a round reads: the live replicas and every target's state.
type Read = (Vec<String>, HashMap<String, String>);

impl Sync {
    async fn round(&mut self) {
        let now = Instant::now();
        let now_ms = wall_ms();
        let result = tokio::time::timeout(ROUND_TIMEOUT, self.exchange(now, now_ms)).await;
        let error = match result {
            Ok(Ok(replicas)) => {
                let mut s = self.cluster.status();
                if !s.connected {
                    tracing::info!(
                        replicas,
                        replica = %self.cluster.replica,
                        "cluster: in sync through redis; breakers use the cluster's windows"
                    );
                }
                s.connected = true;
                s.replicas = replicas;
                s.last_sync = Some(now);
                s.error = None;
                s.rounds += 1;
                s.local_only = false;
                self.connected.store(1, Ordering::Relaxed);
                return;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {} ms", ROUND_TIMEOUT.as_millis()),
        };
        self.conn = None;
        self.connected.store(0, Ordering::Relaxed);
        self.failures.fetch_add(1, Ordering::Relaxed);
        shares::alone(&self.shared.adaptives());
        let mut s = self.cluster.status();
        if s.connected || s.error.is_none() {
            tracing::warn!(
                error = %error,
                redis = %redact_url(&self.cluster.redis),
                "cluster: redis unavailable; breakers carry on with this replica's own windows"
            );
        }
        s.connected = false;
        s.error = Some(error);
        s.rounds += 1;
        s.failed_rounds += 1;
        let stale = s
            .last_sync
            .is_none_or(|t| now.saturating_duration_since(t) >= STALE);
        if stale && !s.local_only {
            s.local_only = true;
            drop(s);
            for (_, health) in self.shared.healths() {
                health.cluster_apply(now, None, Remote::default());
            }
        }
    }

    /// One round with Redis; returns the number of live replicas.
    async fn exchange(&mut self, now: Instant, now_ms: u64) -> redis::RedisResult<usize> {
        let me = self.cluster.replica.clone();
        let healths = self.shared.healths();
        let mut counts = Vec::with_capacity(healths.len());
        for (id, health) in &healths {
            let report = health.cluster_report(now);
            let seen = self.seen.entry(id.clone()).or_default();
            if let Some((at_ms, state)) = report.state {
                let record = StateRecord::new(at_ms, &me, state);
                seen.generation = record.at_ms;
                self.unpublished.insert(id.clone(), record);
            }
            counts.push((id.as_str(), encode_counts(seen.generation, report.counts)));
        }

        let conn = match &mut self.conn {
            Some(c) => c,
            None => self.conn.insert(
                self.client
                    .get_multiplexed_async_connection_with_config(
                        &redis::AsyncConnectionConfig::new()
                            .set_connection_timeout(Some(ROUND_TIMEOUT))
                            .set_response_timeout(Some(ROUND_TIMEOUT)),
                    )
                    .await?,
            ),
        };
        let mine = self.cluster.key(&format!("counts:{me}"));
        let replicas_key = self.cluster.key("replicas");
        let states_key = self.cluster.key("states");
        let stale_ms = STALE.as_millis() as u64;
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.del(&mine).ignore();
        if !counts.is_empty() {
            pipe.hset_multiple(&mine, &counts).ignore();
        }
        pipe.pexpire(&mine, stale_ms as i64).ignore();
        pipe.zadd(&replicas_key, &me, now_ms).ignore();
        pipe.zrembyscore(&replicas_key, 0, now_ms.saturating_sub(stale_ms))
            .ignore();
        for (id, record) in &self.unpublished {
            // Only over an older record: one kept here while Redis was down must not replace
            // what another replica decided meanwhile.
            pipe.cmd("EVAL")
                .arg(SET_IF_NEWER)
                .arg(1)
                .arg(&states_key)
                .arg(id)
                .arg(record.at_ms)
                .arg(record.encode())
                .ignore();
        }
        pipe.zrangebyscore(&replicas_key, now_ms.saturating_sub(stale_ms), "+inf");
        pipe.hgetall(&states_key);
        let (replicas, states): Read = pipe.query_async(conn).await?;
        self.unpublished.clear();

        let others: Vec<&String> = replicas.iter().filter(|r| **r != me).collect();
        let mut theirs: Vec<HashMap<String, String>> = Vec::new();
        if !others.is_empty() {
            let mut pipe = redis::pipe();
            for r in &others {
                pipe.hgetall(self.cluster.key(&format!("counts:{r}")));
            }
            theirs = pipe.query_async(conn).await?;
        }
        let adaptives = self.shared.adaptives();
        if !adaptives.is_empty() {
            let key = self.cluster.key("shares");
            if shares::leads(&me, &replicas) {
                shares::alone(&adaptives);
                let records = shares::records(&me, now_ms, &adaptives);
                let mut pipe = redis::pipe();
                pipe.hset_multiple(&key, &records).ignore();
                pipe.pexpire(&key, (stale_ms * 4) as i64).ignore();
                pipe.query_async::<()>(conn).await?;
            } else {
                let stored: HashMap<String, String> =
                    redis::cmd("HGETALL").arg(&key).query_async(conn).await?;
                shares::adopt(&stored, now_ms, stale_ms, &adaptives);
            }
        }

        for (id, health) in &healths {
            let seen = self.seen.entry(id.clone()).or_default();
            let record = states.get(id).and_then(|s| StateRecord::decode(s));
            // The stored record is the generation (written after ours in the same pipeline,
            // so it already holds this round's decision unless a newer one won).
            seen.generation = record.as_ref().map_or(0, |r| r.at_ms);
            let adopt = match record {
                Some(r)
                    if r.origin != me
                        && seen.applied.as_ref() != Some(&(r.at_ms, r.origin.clone())) =>
                {
                    let adopt = (r.at_ms, r.adopt(now_ms));
                    seen.applied = Some((r.at_ms, r.origin));
                    Some(adopt)
                }
                Some(_) => None,
                None => {
                    // Redis lost the record (a restart without persistence, an eviction): an
                    // open breaker here says so again next round.
                    if let Some(state) = health.open_state(now) {
                        self.unpublished
                            .insert(id.clone(), StateRecord::new(now_ms, &me, state));
                    }
                    None
                }
            };
            let remote = theirs
                .iter()
                .filter_map(|m| m.get(id).and_then(|s| decode_counts(s)))
                .filter(|(generation, _)| *generation == seen.generation)
                .fold(Remote::default(), |sum, (_, c)| sum.plus(c));
            health.cluster_apply(now, adopt, remote);
        }
        Ok(replicas.len().max(1))
    }
}
