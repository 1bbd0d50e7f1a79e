use loomflow::prelude::*;

/// Count down. A parameter's `cfg_attr` stays on the fn.
#[tool]
fn countdown(#[cfg_attr(test, allow(unused_variables))] from: u32) -> u32 {
    from.saturating_sub(1)
}

/// Count up. A condition that names `doc` (with a comma of its own) configures nothing out:
/// it is not taken for a `doc` attribute. Before, it was refused.
#[tool]
fn countup(#[cfg_attr(any(test, doc), allow(unused_variables))] from: u32) -> u32 {
    from + 1
}

fn main() {
    assert_eq!(countdown::call(3), 2);
    assert_eq!(countup::call(3), 4);
}

/// Its own schemars description stands, and a doc comment on the context is left out.
#[tool]
fn described(
    /// Not read: the parameter's own description says it.
    #[schemars(description = "How many")]
    n: u32,
    /// The call's context.
    ctx: &loomflow::tool::ToolContext,
) -> u32 {
    let _ = ctx;
    n
}
