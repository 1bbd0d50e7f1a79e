#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::time::Duration;

use super::file::{BudgetTable, File, PermissionsTable, fields_of};
use super::keys::{closest, parse_duration, position};
use super::*;
use crate::agent::AgentError;

/// The problems of a configuration that must be refused.
fn problems(text: &str) -> Vec<ConfigProblem> {
    match Agent::from_config_str(text, &ToolRegistry::new()) {
        Err(crate::Error::Agent(AgentError::Config(error))) => {
            assert_eq!(error.path, None);
            error.problems
        }
        Err(other) => panic!("not a config error: {other}"),
        Ok(builder) => panic!("accepted: {builder:?}"),
    }
}

fn kinds(text: &str) -> Vec<ConfigProblemKind> {
    problems(text).into_iter().map(|p| p.kind).collect()
}

fn unknown(table: &str, key: &str, suggestion: Option<&str>) -> ConfigProblemKind {
    ConfigProblemKind::UnknownKey {
        table: table.into(),
        key: key.into(),
        suggestion: suggestion.map(Into::into),
    }
}

fn invalid(key: &str, message: &str) -> ConfigProblemKind {
    ConfigProblemKind::InvalidValue {
        key: key.into(),
        message: message.into(),
    }
}

#[test]
fn the_key_lists_come_from_the_serde_types() {
    assert!(fields_of::<File>().contains(&"max_turns"));
    assert!(fields_of::<File>().contains(&"permissions"));
    assert_eq!(
        fields_of::<BudgetTable>(),
        [
            "max_tokens",
            "max_cost_usd",
            "max_tokens_per_user",
            "max_cost_usd_per_user",
            "max_wall_clock",
            "prices_per_million"
        ]
    );
    assert_eq!(
        fields_of::<PermissionsTable>(),
        ["default", "destructive", "tools"]
    );
}

#[test]
fn positions_are_lines_and_character_columns_from_one() {
    let text = "a = 1\nb = \"é\"\nc";
    assert_eq!(position(text, 0), (1, 1));
    assert_eq!(position(text, 6), (2, 1));
    assert_eq!(position(text, 13), (2, 7), "é is one column");
    assert_eq!(position(text, 12), (2, 6), "inside é: é");
    assert_eq!(position(text, 15), (3, 1));
    assert_eq!(position(text, 99), (3, 2), "past the end: the end");
}

#[test]
fn close_keys_are_suggested_and_far_ones_not() {
    let known = ["max_turns", "max_tokens", "timeout"];
    assert_eq!(closest("max_turn", &known), Some("max_turns"));
    assert_eq!(closest("max_tokns", &known), Some("max_tokens"));
    assert_eq!(closest("timeuot", &known), Some("timeout"));
    assert_eq!(closest("max_turns_per_run", &known), Some("max_turns"));
    assert_eq!(closest("time", &known), Some("timeout"));
    assert_eq!(closest("max", &known), None, "too short to be a start");
    assert_eq!(closest("colour", &known), None);
}

#[test]
fn durations_are_number_unit_pairs() {
    let secs = Duration::from_secs_f64;
    assert_eq!(parse_duration("30s"), Some(secs(30.0)));
    assert_eq!(parse_duration("2m"), Some(secs(120.0)));
    assert_eq!(parse_duration("1m30s"), Some(secs(90.0)));
    assert_eq!(parse_duration("1.5h"), Some(secs(5400.0)));
    assert_eq!(parse_duration("250ms"), Some(secs(0.25)));
    for bad in ["", "30", "s", "30x", "1..5s", "-3s", "3 s"] {
        assert_eq!(parse_duration(bad), None, "{bad:?}");
    }
}

#[test]
fn every_unknown_key_is_reported_with_its_table_in_file_order() {
    let text = r#"
instructions = "x"
max_turn = 3
permissions.defualt = "ask"

[budget]
max_token = 10
prices_per_million = { input = 1.0, ouput = 2.0 }

[extra]
defualt = "allow"

[prices]
"gpt-4.1" = { input = 1.0, output = 2.0, cached = 0.5 }
"#;
    let problems = problems(text);
    let found: Vec<_> = problems
        .iter()
        .map(|p| (p.line.unwrap(), p.kind.clone()))
        .collect();
    assert_eq!(
        found,
        [
            (3, unknown("", "max_turn", Some("max_turns"))),
            (4, unknown("permissions", "defualt", Some("default"))),
            (7, unknown("budget", "max_token", Some("max_tokens"))),
            (
                8,
                unknown("budget.prices_per_million", "ouput", Some("output"))
            ),
            (10, unknown("", "extra", None)),
            (14, unknown("prices.\"gpt-4.1\"", "cached", None)),
        ]
    );
}

#[test]
fn a_table_key_at_the_top_level_is_pointed_to_its_table() {
    let text = "instructions = \"x\"\nmax_cost_usd = 1.0\n";
    assert_eq!(
        kinds(text),
        [unknown("", "max_cost_usd", Some("budget.max_cost_usd"))]
    );
    assert!(
        problems(text)[0].to_string().ends_with(
            "unknown top-level key `max_cost_usd` (did you mean `budget.max_cost_usd`?)"
        )
    );
}

#[test]
fn a_value_of_the_wrong_type_names_its_key_and_place() {
    let problems = problems("instructions = \"x\"\n[budget]\nmax_tokens = \"lots\"\n");
    assert_eq!(problems.len(), 1);
    let ConfigProblemKind::InvalidValue { key, message } = &problems[0].kind else {
        panic!("{problems:?}");
    };
    assert_eq!(key, "budget.max_tokens");
    assert!(message.contains("invalid type"), "{message}");
    assert_eq!((problems[0].line, problems[0].column), (Some(3), Some(14)));
}

#[test]
fn toml_syntax_errors_have_a_line_and_column() {
    let problems = problems("instructions = \"x\"\nmax_turns = = 3\n");
    assert!(
        matches!(
            &problems[..],
            [ConfigProblem {
                line: Some(2),
                column: Some(_),
                kind: ConfigProblemKind::Syntax { .. },
                ..
            }]
        ),
        "{problems:?}"
    );
    assert!(problems[0].to_string().starts_with("line 2, column "));
}

#[test]
fn values_are_checked_all_at_once() {
    let text = r#"
name = " "
model = "llama-3"
max_turns = 0
timeout = "soon"
temperature = -1
[budget]
max_cost_usd = -2
prices_per_million = [1.0]
[prices]
m = [1.0, -1.0]
[permissions]
default = "maybe"
destructive = "Deny"
"#;
    let kinds = kinds(text);
    let keys: Vec<&str> = kinds
        .iter()
        .map(|kind| match kind {
            ConfigProblemKind::InvalidValue { key, .. } => key.as_str(),
            ConfigProblemKind::MissingKey { key, .. } => key.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    // A wrong-length price is a type error, which stops the check: fix it to see the rest.
    assert_eq!(keys, ["budget.prices_per_million"]);
    let kinds = self::kinds(&text.replace("[1.0]", "[1.0, 2.0]"));
    let keys: Vec<&str> = kinds
        .iter()
        .map(|kind| match kind {
            ConfigProblemKind::InvalidValue { key, .. } => key.as_str(),
            ConfigProblemKind::MissingKey { key, .. } => key.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        keys,
        [
            "name",
            "model",
            "max_turns",
            "timeout",
            "temperature",
            "budget.max_cost_usd",
            "prices.m",
            "permissions.default",
            "permissions.destructive",
            "instructions",
        ]
    );
    assert!(kinds.contains(&invalid(
        "permissions.default",
        "expected \"allow\", \"ask\" or \"deny\", got \"maybe\""
    )));
    // Above what providers take is pointed at in the file too, not only at build.
    let fixed = text.replace("[1.0]", "[1.0, 2.0]");
    let hot = self::kinds(&fixed.replace("temperature = -1", "temperature = 3.5"));
    assert!(
        hot.contains(&invalid("temperature", "must be from 0 to 2")),
        "{hot:?}"
    );
    // Zero token caps are pointed at in the file too.
    let zeros = format!(
        "max_tokens = 0\n{}",
        fixed.replace(
            "max_cost_usd = -2",
            "max_tokens = 0\nmax_tokens_per_user = 0"
        )
    );
    let zeros = self::kinds(&zeros);
    for key in [
        "max_tokens",
        "budget.max_tokens",
        "budget.max_tokens_per_user",
    ] {
        assert!(
            zeros.contains(&invalid(key, "must be at least 1")),
            "{key}: {zeros:?}"
        );
    }
}

/// A model whose adapter this build does not have is pointed at in the file, not refused
/// only when the agent is built.
#[cfg(not(feature = "anthropic"))]
#[test]
fn a_model_of_a_feature_left_out_is_pointed_at() {
    let kinds = kinds("model = \"claude-sonnet-4-5\"\ninstructions = \"x\"\n");
    assert!(
        kinds.contains(&invalid(
            "model",
            "needs loomflow's cargo feature `anthropic`, which is off"
        )),
        "{kinds:?}"
    );
}

#[test]
fn timeouts_are_seconds_or_durations() {
    for (value, seconds) in [("90", 90.0), ("2.5", 2.5), ("\"1m30s\"", 90.0)] {
        let text = format!("instructions = \"x\"\ntimeout = {value}\n");
        let builder = Agent::from_config_str(&text, &ToolRegistry::new()).unwrap();
        let debug = format!("{builder:?}");
        let expected = format!("timeout: Some({:?})", Duration::from_secs_f64(seconds));
        assert!(debug.contains(&expected), "{value}: {debug}");
    }
    for zero in ["0", "-5", "\"0s\""] {
        assert_eq!(
            kinds(&format!("instructions = \"x\"\ntimeout = {zero}\n")),
            [invalid("timeout", "must be more than zero")],
            "{zero}"
        );
    }
}

#[test]
fn permissions_must_name_listed_tools() {
    let kinds = kinds("instructions = \"x\"\n[permissions.tools]\nrm = \"deny\"\n");
    assert_eq!(
        kinds,
        [ConfigProblemKind::UnlistedToolPermission {
            name: "rm".into(),
            listed: vec![],
        }]
    );
}

#[test]
fn a_missing_file_is_named() {
    let path = std::env::temp_dir().join("loomflow-no-such-dir/agent.toml");
    let error = Agent::from_config(&path, &ToolRegistry::new()).unwrap_err();
    let crate::Error::Agent(AgentError::Config(config)) = &error else {
        panic!("{error}");
    };
    assert_eq!(config.path.as_deref(), Some(path.as_path()));
    assert!(matches!(
        config.problems[0].kind,
        ConfigProblemKind::Unreadable {
            error: std::io::ErrorKind::NotFound,
            ..
        }
    ));
    assert!(
        error.to_string().starts_with(&format!(
            "agent configuration {}: cannot be read: ",
            path.display()
        )),
        "{error}"
    );
}

#[test]
fn a_minimal_file_is_a_builder_without_a_model() {
    let builder = Agent::from_config_str("instructions = \"x\"", &ToolRegistry::new()).unwrap();
    let error = builder.build().unwrap_err();
    assert!(error.to_string().contains("no model"), "{error}");
}
