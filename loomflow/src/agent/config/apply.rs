//! From the file's types to a builder: every check that is not about the file's shape.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use toml::de::DeTable;

use super::error::{ConfigProblem, ConfigProblemKind};
use super::file::{self, File, Price, Timeout};
use super::keys;
use super::registry::{Registered, ToolRegistry};
use crate::agent::{Agent, AgentBuilder, Budget, ContextPolicy};
use crate::model::{ModelSpec, PriceTable};
use crate::tool::{Permission, PermissionPolicy, ToolHost};

/// The reason the model reads when a file's permission denies a call.
const DENIED: &str = "the agent's configuration does not allow it";

/// Reads a configuration: every problem, or the builder.
pub(super) fn load(
    text: &str,
    registry: &ToolRegistry,
) -> Result<AgentBuilder, Vec<ConfigProblem>> {
    let mut doc = match DeTable::parse(text) {
        Ok(doc) => doc,
        Err(error) => {
            let kind = ConfigProblemKind::Syntax {
                message: error.message().trim().to_owned(),
            };
            let at = error.span().map(|span| keys::position(text, span.start));
            return Err(vec![ConfigProblem::new(kind, at)]);
        }
    };
    let mut check = Check {
        text,
        problems: Vec::new(),
    };
    let emptied = keys::remove_unknown(doc.get_mut(), text, &mut check.problems);
    match File::deserialize(toml::de::Deserializer::from(doc.clone())) {
        Ok(file) => {
            let builder = apply(file, registry, &mut check);
            if check.problems.is_empty() {
                return Ok(builder);
            }
        }
        Err(error)
            if error
                .span()
                .is_some_and(|at| emptied.iter().any(|e| e.contains(&at.start))) =>
        {
            // A consequence of a key already reported as unknown.
        }
        Err(error) => {
            let key = error
                .span()
                .and_then(|span| keys::key_at(doc.get_ref(), span.start))
                .unwrap_or_default();
            let message = error.message().trim().to_owned();
            check.push(
                ConfigProblemKind::InvalidValue { key, message },
                error.span(),
            );
        }
    }
    let mut problems = check.problems;
    problems.sort_by_key(|p| (p.line.is_none(), p.line, p.column));
    Err(problems)
}

/// The problems found so far, and the text they are placed in.
struct Check<'t> {
    text: &'t str,
    problems: Vec<ConfigProblem>,
}

impl Check<'_> {
    fn push(&mut self, kind: ConfigProblemKind, span: Option<Range<usize>>) {
        let at = span.map(|span| keys::position(self.text, span.start));
        self.problems.push(ConfigProblem::new(kind, at));
    }

    fn invalid(&mut self, key: &str, message: impl Into<String>, span: Range<usize>) {
        let kind = ConfigProblemKind::InvalidValue {
            key: key.to_owned(),
            message: message.into(),
        };
        self.push(kind, Some(span));
    }

    /// A price that is a number of dollars, zero or more.
    fn price(&mut self, key: &str, price: &Spanned<Price>) -> Option<(f64, f64)> {
        let Price { input, output } = *price.get_ref();
        let valid = |p: f64| p.is_finite() && p >= 0.0;
        if valid(input) && valid(output) {
            Some((input, output))
        } else {
            self.invalid(key, "prices must be zero or more", price.span());
            None
        }
    }

    /// `"allow"`, `"ask"` or `"deny"`.
    fn permission(&mut self, key: &str, value: &Spanned<String>) -> Option<Permission> {
        match value.get_ref().as_str() {
            "allow" => Some(Permission::Allow),
            "ask" => Some(Permission::Ask),
            "deny" => Some(Permission::Deny(DENIED.to_owned())),
            other => {
                let message = format!("expected \"allow\", \"ask\" or \"deny\", got {other:?}");
                self.invalid(key, message, value.span());
                None
            }
        }
    }

    fn duration(&mut self, key: &str, value: &Spanned<Timeout>) -> Option<Duration> {
        let duration = match value.get_ref() {
            Timeout::Seconds(seconds) if *seconds <= 0.0 => Some(Duration::ZERO),
            Timeout::Seconds(seconds) => Duration::try_from_secs_f64(*seconds).ok(),
            Timeout::Text(text) => keys::parse_duration(text),
        };
        match duration {
            Some(duration) if !duration.is_zero() => Some(duration),
            Some(_) => {
                self.invalid(key, "must be more than zero", value.span());
                None
            }
            None => {
                let message = "expected seconds (30, 2.5) or a duration (\"30s\", \"2m\", \
                               \"1m30s\", \"500ms\")";
                self.invalid(key, message, value.span());
                None
            }
        }
    }
}

/// Checks the typed file against the registry and itself, and applies it to a builder.
fn apply(file: File, registry: &ToolRegistry, check: &mut Check<'_>) -> AgentBuilder {
    let instructions = file.instructions.unwrap_or_else(|| {
        let kind = ConfigProblemKind::MissingKey {
            table: String::new(),
            key: "instructions".to_owned(),
        };
        check.push(kind, None);
        String::new()
    });
    let mut builder = Agent::builder(instructions);
    if let Some(name) = file.name {
        if name.get_ref().trim().is_empty() {
            check.invalid("name", "must not be empty", name.span());
        }
        builder = builder.name(name.into_inner());
    }
    if let Some(model) = file.model {
        match ModelSpec::parse(model.get_ref()) {
            Err(error) => check.invalid("model", error.to_string(), model.span()),
            Ok(spec) if !spec.provider.is_built_in() => {
                let feature = spec.provider.feature();
                let problem = format!("needs loomflow's cargo feature `{feature}`, which is off");
                check.invalid("model", problem, model.span());
            }
            Ok(_) => {}
        }
        builder = builder.model_name(model.into_inner());
    }
    if let Some(turns) = file.max_turns {
        if *turns.get_ref() == 0 {
            check.invalid("max_turns", "must be at least 1", turns.span());
        }
        builder = builder.max_turns(turns.into_inner());
    }
    if let Some(retries) = file.max_schema_retries {
        builder = builder.max_schema_retries(retries);
    }
    if let Some(timeout) = file
        .timeout
        .as_ref()
        .and_then(|t| check.duration("timeout", t))
    {
        builder = builder.timeout(timeout);
    }
    if let Some(temperature) = file.temperature {
        let t = *temperature.get_ref();
        if !(0.0..=2.0).contains(&t) {
            check.invalid("temperature", "must be from 0 to 2", temperature.span());
        }
        builder = builder.temperature(t);
    }
    if let Some(max_tokens) = file.max_tokens {
        if *max_tokens.get_ref() == 0 {
            check.invalid("max_tokens", "must be at least 1", max_tokens.span());
        }
        builder = builder.max_tokens(max_tokens.into_inner());
    }
    if file.durable_approvals == Some(true) {
        builder = builder.durable_approvals();
    }
    if let Some(record) = file.record_content {
        builder = builder.record_content(record);
    }
    if let Some(table) = file.budget {
        builder = builder.budget(budget(table, check));
    }
    if let Some(table) = file.context
        && let Some(policy) = context_policy(table, check)
    {
        builder = builder.context_policy(policy);
    }
    if !file.prices.is_empty() {
        let mut prices = PriceTable::new();
        for (model, price) in &file.prices {
            let key = format!("prices.{}", keys::quoted(model));
            if let Some((input, output)) = check.price(&key, price) {
                prices = prices.model(model, input, output);
            }
        }
        builder = builder.prices(prices);
    }
    builder.tools(tool_host(&file.tools, file.permissions, registry, check))
}

fn context_policy(table: file::ContextTable, check: &mut Check<'_>) -> Option<ContextPolicy> {
    let mut policy = match table.strategy.get_ref().as_str() {
        "snip" => ContextPolicy::snip(),
        "compact" => ContextPolicy::compact(),
        other => {
            let message = format!("expected \"snip\" or \"compact\", got {other:?}");
            check.invalid("context.strategy", message, table.strategy.span());
            return None;
        }
    };
    if let Some(tokens) = table.above_tokens {
        policy = policy.above_tokens(tokens);
    }
    if let Some(keep) = table.keep_recent {
        if *keep.get_ref() == 0 {
            check.invalid("context.keep_recent", "must be at least 1", keep.span());
        }
        policy = policy.keep_recent(keep.into_inner());
    }
    Some(policy)
}

fn budget(table: file::BudgetTable, check: &mut Check<'_>) -> Budget {
    let mut budget = Budget::default();
    if let Some(tokens) = table.max_tokens {
        if *tokens.get_ref() == 0 {
            check.invalid("budget.max_tokens", "must be at least 1", tokens.span());
        }
        budget = budget.max_tokens(tokens.into_inner());
    }
    if let Some(usd) = table.max_cost_usd {
        let cap = *usd.get_ref();
        if !(cap.is_finite() && cap > 0.0) {
            check.invalid("budget.max_cost_usd", "must be more than zero", usd.span());
        }
        budget = budget.max_cost_usd(cap);
    }
    if let Some(tokens) = table.max_tokens_per_user {
        if *tokens.get_ref() == 0 {
            let key = "budget.max_tokens_per_user";
            check.invalid(key, "must be at least 1", tokens.span());
        }
        budget = budget.max_tokens_per_user(tokens.into_inner());
    }
    if let Some(usd) = table.max_cost_usd_per_user {
        let cap = *usd.get_ref();
        if !(cap.is_finite() && cap > 0.0) {
            check.invalid(
                "budget.max_cost_usd_per_user",
                "must be more than zero",
                usd.span(),
            );
        }
        budget = budget.max_cost_usd_per_user(cap);
    }
    if let Some(wall) = table
        .max_wall_clock
        .as_ref()
        .and_then(|w| check.duration("budget.max_wall_clock", w))
    {
        budget = budget.max_wall_clock(wall);
    }
    if let Some(price) = &table.prices_per_million
        && let Some((input, output)) = check.price("budget.prices_per_million", price)
    {
        budget = budget.prices_per_million(input, output);
    }
    budget
}

/// The agent's tool host: the listed tools and tool sets, under the file's permissions.
fn tool_host(
    listed: &[Spanned<String>],
    permissions: Option<file::PermissionsTable>,
    registry: &ToolRegistry,
    check: &mut Check<'_>,
) -> ToolHost {
    let mut host = ToolHost::new();
    // The names permissions may use: listed tools, and the tools listed sets offer now.
    let mut tools = BTreeSet::new();
    let mut sets = BTreeMap::new();
    // The listed tools added, each once: one a listed set also offers is added all the
    // same, whatever the order, and wins over the set's (as `ToolHost::with_set` says).
    let mut added = BTreeSet::new();
    for name in listed {
        match registry.get(name.get_ref()) {
            Some(Registered::Tool(tool)) => {
                tools.insert(name.get_ref().clone());
                if added.insert(name.get_ref().clone()) {
                    host.add_arc(tool.clone());
                }
            }
            Some(Registered::Set(set)) => {
                if !sets.contains_key(name.get_ref()) {
                    let offered: Vec<String> =
                        set.tools().iter().map(|t| t.spec().name.clone()).collect();
                    tools.extend(offered.iter().cloned());
                    sets.insert(name.get_ref().clone(), offered);
                    host.add_set(set.clone());
                }
            }
            None => {
                let kind = ConfigProblemKind::UnregisteredTool {
                    name: name.get_ref().clone(),
                    registered: registry.names().map(str::to_owned).collect(),
                };
                check.push(kind, Some(name.span()));
            }
        }
    }
    let Some(permissions) = permissions else {
        return host;
    };
    let default = permissions
        .default
        .as_ref()
        .and_then(|value| check.permission("permissions.default", value));
    let mut policy = PermissionPolicy::new(default.unwrap_or(Permission::Allow));
    if let Some(value) = &permissions.destructive
        && let Some(permission) = check.permission("permissions.destructive", value)
    {
        policy = policy.destructive(permission);
    }
    for (tool, value) in &permissions.tools {
        let key = format!("permissions.tools.{}", keys::quoted(tool));
        if let Some(offered) = sets.get(tool) {
            let message = format!(
                "`{tool}` is a tool set; permissions name its tools (now: {})",
                offered.join(", ")
            );
            check.invalid(&key, message, value.span());
        } else if !tools.contains(tool) {
            let kind = ConfigProblemKind::UnlistedToolPermission {
                name: tool.clone(),
                listed: tools.iter().cloned().collect(),
            };
            check.push(kind, Some(value.span()));
        }
        if let Some(permission) = check.permission(&key, value) {
            policy = policy.tool(tool.clone(), permission);
        }
    }
    host.permissions(policy)
}
