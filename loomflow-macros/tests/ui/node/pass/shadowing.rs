use loomflow::prelude::*;

#[derive(Clone, Default, Serialize, Deserialize)]
struct Pair {
    first: u32,
}

mod nodes {
    use super::Pair;
    use loomflow::prelude::*;

    /// Bumps the first field.
    #[node]
    pub async fn first(state: &mut Pair) {
        state.first += 1;
    }
}

use nodes::first;

// Bindings named like the node are fine where the node is not in scope.
mod elsewhere {
    pub fn add(first: u32) -> u32 {
        let second = first + 1;
        let super::Pair { first, .. } = super::Pair { first: second };
        first
    }
}

fn main() {
    assert_eq!(elsewhere::add(1), 2);
    // Everything the node's name stands for still works.
    assert_eq!(Node::<Pair>::name(&first), "first");
    assert_eq!(Node::<Pair>::description(&first), Some("Bumps the first field."));
    let copy = first;
    let _ = Graph::new("g").node(first).node(nodes::first).node(copy);
    let mut pair = Pair::default();
    let _ = first::call(&mut pair);
}
