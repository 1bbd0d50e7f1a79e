//! Compile-time behaviour of the macros: what must compile, and the errors for what must not.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[test]
fn node_macro() {
    let cases = trybuild::TestCases::new();
    cases.pass("ui/node/pass/*.rs");
    cases.compile_fail("ui/node/fail/*.rs");
}

#[test]
fn agent_macro() {
    let cases = trybuild::TestCases::new();
    cases.pass("ui/agent/pass/*.rs");
    cases.compile_fail("ui/agent/fail/*.rs");
}

#[test]
fn tool_macro() {
    let cases = trybuild::TestCases::new();
    cases.pass("ui/tool/pass/*.rs");
    cases.compile_fail("ui/tool/fail/*.rs");
}
