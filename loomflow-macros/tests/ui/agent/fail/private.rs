// #[agent] does not make a private struct public.
mod agents {
    /// Private to this module.
    #[loomflow::agent(model = "echo")]
    struct Hidden;
}

fn main() {
    let _ = agents::Hidden::agent();
}
