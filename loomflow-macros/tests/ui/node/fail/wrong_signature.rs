use loomflow::prelude::*;

#[node]
async fn by_value(state: u32) {
    let _ = state;
}

#[node]
async fn mut_context(state: &mut u32, ctx: &mut Context) {
    let _ = (state, ctx);
}

#[node]
async fn too_many(state: &mut u32, ctx: &Context, extra: u8) {
    let _ = (state, ctx, extra);
}

struct Config;

/// Not the context: reported at the type, as the mismatch it is.
#[node]
async fn not_a_context(state: &mut u32, config: &Config) {
    let _ = (state, config);
}

#[node]
async fn nothing() {}

fn main() {}
