use loomflow::prelude::*;

/// Gets the weather.
#[tool]
fn weather(city: String) -> String {
    city
}

/// An entry of `tools(...)` that is not a tool is the one error, at the entry: the model and
/// the tool beside it still count (no "needs a model").
#[agent(model = "echo", tools(weather, "lookup"), max_turns = 3)]
struct Forecaster;

fn main() {}
