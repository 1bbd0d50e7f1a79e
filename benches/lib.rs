//! Criterion benchmarks for loomflow live in `benches/`.
