use loomflow::prelude::*;

/// Gets the weather.
#[tool]
fn weather(city: String) -> String {
    city
}

/// A malformed entry in `tools(...)` is the one error: the model and the tool beside it
/// still count (no "needs a model").
#[agent(model = "echo", tools(weather, "lookup"), max_turns = 3)]
struct Forecaster;

fn main() {}
