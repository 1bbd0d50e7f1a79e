use loomflow::prelude::*;

/// Gets the weather.
#[tool]
fn weather(city: String) -> String {
    city
}

/// An entry in `tools(...)` that fails inside a group of its own is the one error: the
/// model beside it still counts (no "needs a model").
#[agent(model = "echo", tools(weather::<(b c)>), max_turns = 3)]
struct Forecaster;

fn main() {}
