//! Integration tests for loomflow live in `tests/` as separate test targets.
