//! The demo's world: two mock providers on free ports, the config that puts them behind two
//! routes (one adaptive, one priority; breaker, probe, ramp and share timings scaled to the
//! demo's length so a whole outage and recovery fit in it), and the gateway's listener.

use std::path::Path;
use std::time::Duration;

use tokio::net::TcpListener;

use super::phases;
use crate::mock::{FaultPlan, MockServer};

/// The primary provider's name (an OpenAI account).
pub(super) const PRIMARY: &str = "openai-primary";
/// The backup provider's name (an Azure OpenAI deployment).
pub(super) const BACKUP: &str = "azure-backup";
/// The route of ordinary turns.
pub(super) const CHAT_ROUTE: &str = "gpt-4o";
/// The route of planning turns, where the model must pick a tool.
pub(super) const TOOLS_ROUTE: &str = "gpt-4o-tools";
/// The primary's model (and its tool-calling sibling), the backup's deployments.
const PRIMARY_MODELS: [&str; 2] = ["gpt-4o", "gpt-4o-tools"];
const BACKUP_DEPLOYMENTS: [&str; 2] = ["gpt-4o-prod", "gpt-4o-tools-prod"];

/// The two mock providers.
pub(super) struct Mocks {
    /// `openai-primary`, OpenAI wire format.
    pub primary: MockServer,
    /// `azure-backup`, Azure OpenAI wire format.
    pub backup: MockServer,
}

impl Mocks {
    /// Start both, healthy.
    pub(super) async fn start() -> std::io::Result<Mocks> {
        let mocks = Mocks {
            primary: MockServer::spawn(PRIMARY).await?,
            backup: MockServer::spawn(BACKUP).await?,
        };
        mocks.set_primary(phases::primary_base());
        apply(&mocks.backup, BACKUP_DEPLOYMENTS[1], phases::backup_base());
        Ok(mocks)
    }

    /// What the primary does from now on (both of its models).
    pub(super) fn set_primary(&self, plan: FaultPlan) {
        apply(&self.primary, PRIMARY_MODELS[1], plan);
    }

    /// Stop both.
    pub(super) async fn shutdown(self) {
        self.primary.shutdown().await;
        self.backup.shutdown().await;
    }
}

/// `plan` for every model of `mock`; the tool model gets it with `tool_call` on (a planning
/// turn sends `tool_choice: "required"`, so a tool call is the right answer there).
fn apply(mock: &MockServer, tool_model: &str, plan: FaultPlan) {
    mock.set_model_plan(
        tool_model,
        FaultPlan {
            tool_call: true,
            ..plan.clone()
        },
    );
    mock.set_plan(plan);
}

/// `d` scaled by `scale`, at least `floor`, in whole milliseconds for the config.
fn scaled(d: Duration, scale: f64, floor: Duration) -> String {
    format!("{}ms", d.mul_f64(scale).max(floor).as_millis())
}

/// The demo's config. Breaker timings are the contract's defaults shrunk to the demo's length
/// (a 60 s demo holds a tripped target 4 s, probes every 1.5 s, ramps over 5 s), and so is the
/// volume its rules wait for: 5 requests in the window, not 20, and a run of 3 failures on a
/// healthy target, not 5. A target sees a few requests a second here, fewer once the adaptive
/// route has moved its share away: a short demo's outage can leave each of the primary's two
/// targets with four failed calls, and the breaker would then never open in it. The retry
/// budget is roomier than the default so that the scripted outage never spends it.
pub(super) fn config_toml(mocks: &Mocks, audit_db: &Path, duration: Duration) -> String {
    let s = duration.as_secs_f64() / 60.0;
    let ms = Duration::from_millis;
    let window = scaled(Duration::from_secs(20), s, ms(2000));
    let open_for = scaled(Duration::from_secs(4), s, ms(500));
    let open_for_max = scaled(Duration::from_secs(8), s, ms(1000));
    let probe_interval = scaled(ms(1500), s, ms(200));
    let ramp = scaled(Duration::from_secs(5), s, ms(500));
    let interval = scaled(Duration::from_secs(1), s, ms(200));
    let audit = audit_db.display().to_string().replace('\\', "/");
    format!(
        r#"# The config `switchyard demo` ran with (mock providers on this machine, no keys).
[server]
listen = "127.0.0.1:0"

[[providers]]
name = "{PRIMARY}"
kind = "openai"
base_url = "{primary}"
api_key = "demo-key-not-a-secret"

[[providers]]
name = "{BACKUP}"
kind = "azure"
base_url = "{backup}"
api_key = "demo-key-not-a-secret"
api_version = "2024-10-21"

[defaults.failover]
attempt_timeout = "5s"
first_token_timeout = "3s"
idle_timeout = "3s"
request_timeout = "20s"

[defaults.breaker]
window = "{window}"
min_requests = 5
consecutive_failures = 3
open_for = "{open_for}"
open_for_max = "{open_for_max}"
probe_interval = "{probe_interval}"
half_open_probes = 3
ramp = "{ramp}"

[defaults.hedge]
delay = "p99"
budget = 0.3

[defaults.retry_budget]
ratio = 0.5
min_per_sec = 20

# Ordinary turns: adaptive, nine tenths to the primary while it is healthy; its share
# follows its live latency and errors (the brownout), within the breaker's gate (the outage).
[[routes]]
name = "{CHAT_ROUTE}"
strategy = "adaptive"
targets = [
  {{ provider = "{PRIMARY}", model = "{m0}", weight = 9 }},
  {{ provider = "{BACKUP}", deployment = "{d0}", weight = 1 }},
]
[routes.adaptive]
interval = "{interval}"
# Twice the default step: the demo's phases are seconds long.
max_step = 0.4
# The demo's few conversations would each stay on one target; drawn anew, the shares show.
affinity = "off"

# Planning turns: priority, the primary first.

[[routes]]
name = "{TOOLS_ROUTE}"
targets = [
  {{ provider = "{PRIMARY}", model = "{m1}" }},
  {{ provider = "{BACKUP}", deployment = "{d1}" }},
]

[audit]
store = "sqlite://{audit}"
"#,
        primary = mocks.primary.base_url(),
        backup = mocks.backup.root_url(),
        m0 = PRIMARY_MODELS[0],
        m1 = PRIMARY_MODELS[1],
        d0 = BACKUP_DEPLOYMENTS[0],
        d1 = BACKUP_DEPLOYMENTS[1],
    )
}

/// The gateway's listener: 127.0.0.1:8080 when the demo stays up afterwards and that port is
/// free (the address people expect), else any free port.
pub(super) async fn listener(keep_running: bool) -> std::io::Result<TcpListener> {
    if keep_running {
        if let Ok(l) = TcpListener::bind(("127.0.0.1", 8080)).await {
            return Ok(l);
        }
    }
    TcpListener::bind(("127.0.0.1", 0)).await
}
