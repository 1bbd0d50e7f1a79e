#!/usr/bin/env bash
# Instructions per unit of the in-memory peer workloads, counted by callgrind (valgrind).
# Unlike time on a shared machine, the count repeats: a change of 1% shows. Differences of
# about 100 instructions a cycle come from code layout alone.
#   benches/instructions.sh            (from the project root; needs valgrind)
# Each workload runs N and 2N times; the difference, over N, is one unit's work without the
# process's start (see benches/examples/cycles.rs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is not installed" >&2; exit 2; }
cargo build -q --release -p loomflow-benches --example cycles
bin="${CARGO_TARGET_DIR:-target}/release/examples/cycles"

count() { # workload runs -> instructions
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 |
    sed -n 's/.*Collected : //p'
}

per_unit() { # workload runs units-per-run label
  local one two
  one=$(count "$1" "$2")
  two=$(count "$1" $(($2 * 2)))
  echo "$4: $(( (two - one) / ($2 * $3) )) instructions"
}

per_unit interrupt_resume 1000 1 "interrupt_resume (memory): per interrupt + resume cycle"
per_unit linear_ckpt 20 100 "linear_ckpt (memory): per node, a checkpoint a step"
per_unit single 1000 1 "single (memory): per run of one node, on a thread of its own"
