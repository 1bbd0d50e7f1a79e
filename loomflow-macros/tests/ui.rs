//! Compile-time behaviour of the macros: what must compile, and the errors for what must not.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[test]
fn node_macro() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/node/pass/*.rs");
    cases.compile_fail("tests/ui/node/fail/*.rs");
}

#[test]
fn agent_macro() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/agent/pass/*.rs");
    cases.compile_fail("tests/ui/agent/fail/*.rs");
}

#[test]
fn tool_macro() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/tool/pass/*.rs");
    cases.compile_fail("tests/ui/tool/fail/*.rs");
}
