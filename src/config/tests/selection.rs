//! `strategy`, target `weight` and `price`, and `[routes.adaptive]`.

use std::time::Duration;

use super::{error_at, errors, load, PROVIDERS};
use crate::config::{AdaptivePolicy, Affinity, Strategy};

/// A route of two targets with `strategy`, the second target's extra keys, and `tail`.
fn route(strategy: &str, second: &str, tail: &str) -> String {
    format!(
        "{PROVIDERS}\n[[routes]]\nname = \"smart\"\nstrategy = \"{strategy}\"\n\
         targets = [{{ provider = \"openai\", model = \"gpt-4o\", weight = 3 }}, \
         {{ provider = \"azure\", deployment = \"gpt-4o-prod\"{second} }}]\n{tail}"
    )
}

#[test]
fn adaptive_routes_take_weights_prices_and_their_table() {
    let config = load(&route(
        "adaptive",
        ", weight = 1, price = { input = 2.0, output = 8.0 }",
        "[routes.adaptive]\nfloor = 0.05\ninterval = \"2s\"\nmax_step = 0.1\naffinity = \"off\"\n",
    ));
    let r = &config.routes[0];
    assert_eq!(r.strategy, Strategy::Adaptive);
    assert_eq!(r.weights, vec![3.0, 1.0]);
    // Blended three input tokens to one output token.
    assert_eq!(r.prices, vec![None, Some(3.5)]);
    assert_eq!(
        r.adaptive,
        AdaptivePolicy {
            floor: 0.05,
            interval: Duration::from_secs(2),
            max_step: 0.1,
            affinity: Affinity::Off,
        }
    );
    let table = config.routing_table();
    assert!(table.contains("route smart (strategy adaptive)"), "{table}");
    assert!(
        table.contains("adaptive: floor 0.05, interval 2s, max_step 0.10, affinity off"),
        "{table}"
    );
}

#[test]
fn defaults_weight_one_and_the_contracts_adaptive_table() {
    let config = load(&route("weighted", "", ""));
    let r = &config.routes[0];
    assert_eq!(r.strategy, Strategy::Weighted);
    assert_eq!(r.weights, vec![3.0, 1.0]);
    assert_eq!(r.adaptive, AdaptivePolicy::default());
    assert_eq!(r.adaptive.affinity, Affinity::Session);
    assert_eq!(r.adaptive.interval, Duration::from_secs(5));
    assert!((r.adaptive.floor - 0.02).abs() < 1e-12 && (r.adaptive.max_step - 0.2).abs() < 1e-12);
}

#[test]
fn mistakes_are_reported_at_their_keys() {
    // Weights and prices on a route that does not read them.
    let text = route("priority", ", price = { input = 1.0 }", "");
    let errs = errors(&text);
    error_at(
        &errs,
        "routes[0].targets[0].weight",
        "does not read weights",
    );
    error_at(
        &errs,
        "routes[0].targets[1].price",
        "only an adaptive route",
    );
    let errs = errors(&route("weighted", ", weight = -1", ""));
    error_at(&errs, "routes[0].targets[1].weight", "out of range");
    let errs = errors(&route("adaptive", ", price = { input = -2.0 }", ""));
    error_at(&errs, "routes[0].targets[1].price.input", "out of range");
    let errs = errors(&route("adaptive", ", price = {}", ""));
    error_at(
        &errs,
        "routes[0].targets[1].price",
        "needs input, output or both",
    );
    let text = route("weighted", ", weight = 0", "").replace("weight = 3", "weight = 0");
    error_at(
        &errors(&text),
        "routes[0].targets",
        "every target has weight 0",
    );
    // [routes.adaptive] on a priority route, and its values.
    let errs = errors(&format!(
        "{PROVIDERS}\n[[routes]]\nname = \"p\"\ntargets = [{{ provider = \"openai\", model = \"m\" }}]\n\
         [routes.adaptive]\nfloor = 0.1\n"
    ));
    error_at(
        &errs,
        "routes[0].adaptive",
        "only a weighted or adaptive route",
    );
    let tail = "[routes.adaptive]\nfloor = 0.6\ninterval = \"10ms\"\nmax_step = 0\naffinity = \"sticky\"\n";
    let errs = errors(&route("adaptive", "", tail));
    error_at(&errs, "routes[0].adaptive.floor", "out of range");
    error_at(&errs, "routes[0].adaptive.interval", "at least 100ms");
    error_at(&errs, "routes[0].adaptive.max_step", "out of range");
    error_at(
        &errs,
        "routes[0].adaptive.affinity",
        "unknown value `sticky`",
    );
    let errs = errors(&route(
        "adaptive",
        "",
        "[routes.adaptive]\nfloor = 0.5\nflor = 1\n",
    ));
    error_at(&errs, "routes[0].adaptive.flor", "unknown field");
    // Three targets with a floor of 0.4 each is more than all the traffic.
    let text = route("adaptive", "", "[routes.adaptive]\nfloor = 0.4\n").replace(
        "deployment = \"gpt-4o-prod\" }]",
        "deployment = \"gpt-4o-prod\" }, { provider = \"openai\", model = \"gpt-4o-mini\" }]",
    );
    error_at(
        &errors(&text),
        "routes[0].adaptive.floor",
        "more than all the traffic",
    );
}
