//! [`ConfigError`]: everything wrong with an agent configuration file.

use std::fmt;
use std::path::PathBuf;

use crate::agent::AgentError;

/// Why an agent configuration was refused: every problem found, in file order.
///
/// Returned (inside [`AgentError::Config`]) by [`Agent::from_config`] and
/// [`Agent::from_config_str`]. Its message names the file, and for each problem its line
/// and column and the key, tool or value at fault:
///
/// ```text
/// agent configuration agent.toml: line 2, column 10: tool `serach` is not in the registry
/// (registered: lookup_order, search); line 4, column 1: unknown top-level key `max_turn`
/// (did you mean `max_turns`?)
/// ```
///
/// [`Agent::from_config`]: crate::agent::Agent::from_config
/// [`Agent::from_config_str`]: crate::agent::Agent::from_config_str
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ConfigError {
    /// The file, when the configuration was read from one.
    pub path: Option<PathBuf>,
    /// Every problem found, in file order (problems without a position last).
    pub problems: Vec<ConfigProblem>,
}

/// One problem in an agent configuration.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ConfigProblem {
    /// The line it is on, from 1, when it has a place in the file.
    pub line: Option<usize>,
    /// The column it starts at, from 1 (in characters), when it has a place in the file.
    pub column: Option<usize>,
    /// What is wrong.
    pub kind: ConfigProblemKind,
}

/// What is wrong; see [`ConfigProblem`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ConfigProblemKind {
    /// The file could not be read: it does not exist, or may not be read, or is not UTF-8.
    Unreadable {
        /// The kind of I/O error.
        error: std::io::ErrorKind,
        /// The I/O error's message.
        message: String,
    },
    /// The text is not valid TOML.
    Syntax {
        /// The parser's message.
        message: String,
    },
    /// A key the configuration does not have.
    UnknownKey {
        /// The table it is in, as a dotted path (`""` at the top level, `budget`, ...).
        table: String,
        /// The key.
        key: String,
        /// The known key of that table it is closest to, when one is close.
        suggestion: Option<String>,
    },
    /// A required key is missing.
    MissingKey {
        /// The table it belongs in (`""` at the top level).
        table: String,
        /// The key.
        key: String,
    },
    /// A value has the wrong type or is out of range.
    InvalidValue {
        /// The key, as a dotted path (`max_turns`, `permissions.tools.refund`, ...); empty
        /// in the rare case the parser's error could not be placed.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// `tools` names a tool (or tool set) the registry does not have.
    UnregisteredTool {
        /// The name in the file.
        name: String,
        /// Every name the registry has, sorted.
        registered: Vec<String>,
    },
    /// `[permissions.tools]` names a tool the agent does not get.
    UnlistedToolPermission {
        /// The tool named.
        name: String,
        /// The tools the agent gets: `tools`, and those its tool sets offer now.
        listed: Vec<String>,
    },
}

impl ConfigProblem {
    pub(super) fn new(kind: ConfigProblemKind, position: Option<(usize, usize)>) -> Self {
        Self {
            line: position.map(|(line, _)| line),
            column: position.map(|(_, column)| column),
            kind,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("agent configuration")?;
        if let Some(path) = &self.path {
            write!(f, " {}", path.display())?;
        }
        f.write_str(": ")?;
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, "line {line}, column {column}: ")?,
            (Some(line), None) => write!(f, "line {line}: ")?,
            _ => {}
        }
        write!(f, "{}", self.kind)
    }
}

impl fmt::Display for ConfigProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreadable { message, .. } => write!(f, "cannot be read: {message}"),
            Self::Syntax { message } => write!(f, "not valid TOML: {message}"),
            Self::UnknownKey {
                table,
                key,
                suggestion,
            } => {
                if table.is_empty() {
                    write!(f, "unknown top-level key `{key}`")?;
                } else {
                    write!(f, "unknown key `{key}` in [{table}]")?;
                }
                match suggestion {
                    Some(known) => write!(f, " (did you mean `{known}`?)"),
                    None => Ok(()),
                }
            }
            Self::MissingKey { table, key } if table.is_empty() => {
                write!(f, "missing required key `{key}`")
            }
            Self::MissingKey { table, key } => {
                write!(f, "missing required key `{key}` in [{table}]")
            }
            Self::InvalidValue { key, message } if key.is_empty() => f.write_str(message),
            Self::InvalidValue { key, message } => write!(f, "`{key}`: {message}"),
            Self::UnregisteredTool { name, registered } if registered.is_empty() => {
                write!(f, "tool `{name}` is not in the registry (it is empty)")
            }
            Self::UnregisteredTool { name, registered } => write!(
                f,
                "tool `{name}` is not in the registry (registered: {})",
                registered.join(", ")
            ),
            Self::UnlistedToolPermission { name, listed } => {
                write!(
                    f,
                    "[permissions.tools] names `{name}`, which is not one of the agent's tools"
                )?;
                if listed.is_empty() {
                    f.write_str(" (`tools` is empty)")
                } else {
                    write!(f, " ({})", listed.join(", "))
                }
            }
        }
    }
}

impl From<ConfigError> for crate::Error {
    fn from(error: ConfigError) -> Self {
        AgentError::Config(error).into()
    }
}
