//! The failover loop's entry: serve a [`Request`] on a route and return its [`Outcome`].
//!
//! Read it as: pick the next usable target (`pick`: breaker closed, not parked), start an attempt
//! (`launch`), and while it runs wait for whichever comes first (`race`): its answer, its failure
//! (`classify` decides whether to retry here, move on, or hand the provider's answer back), or
//! the hedge delay (a second attempt races the first on the next healthy target; the first good
//! answer wins and the others are dropped, which closes their connections). The client sees one
//! answer.

use std::sync::Arc;

use super::race::Race;
use super::request::{Outcome, Request};
use super::Route;

/// Serve a request on a route with soft failover and hedging.
pub async fn dispatch(route: &Arc<Route>, req: &Request) -> Outcome {
    let mut race = Race::new(route, req);
    race.run().await
}
