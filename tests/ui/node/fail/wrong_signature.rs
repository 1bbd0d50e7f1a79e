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

#[node]
async fn nothing() {}

fn main() {}
