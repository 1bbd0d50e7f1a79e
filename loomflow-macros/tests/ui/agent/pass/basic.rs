use loomflow::prelude::*;

/// You repeat what you are told.
#[agent(model = "echo", max_turns = 3, timeout_secs = 30, temperature = 0.2, max_tokens = 100)]
pub struct Parrot;

#[agent(instructions = "Be brief.", name = "brief one", crate = ::loomflow)]
struct Brief {
    _unused: u8,
}

fn main() {
    let parrot = Parrot::agent().unwrap();
    assert_eq!(parrot.name(), "parrot");
    let brief = Brief::builder().model(loomflow::model::EchoModel::new()).build().unwrap();
    assert_eq!(brief.name(), "brief one");
}
