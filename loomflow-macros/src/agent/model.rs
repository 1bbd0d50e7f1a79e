//! A validated description of an `#[agent]` struct.

use syn::{Data, DeriveInput};

use super::attr::AgentArgs;
use crate::common::{doc_text, unraw, unread_doc};

pub(crate) struct AgentModel {
    pub(crate) input: DeriveInput,
    pub(crate) args: AgentArgs,
    pub(crate) instructions: String,
    pub(crate) name: String,
}

/// An `#[agent]` item that failed validation: what the fallback expansion still needs.
pub(crate) struct Invalid {
    pub(crate) error: syn::Error,
    pub(crate) input: DeriveInput,
    pub(crate) krate: Option<syn::Path>,
}

impl AgentModel {
    /// Validates the attribute and the item together, so that every problem is reported.
    pub(crate) fn new(mut args: AgentArgs, input: DeriveInput) -> Result<Self, Box<Invalid>> {
        let mut errors = std::mem::take(&mut args.errors);
        if !matches!(input.data, Data::Struct(_)) {
            errors.push_spanned(
                &input.ident,
                "#[agent] goes on a struct; its doc comment is the agent's instructions",
            );
        }
        if !input.generics.params.is_empty() {
            errors.push_spanned(&input.generics, "#[agent] structs cannot be generic");
        }
        if let (None, Some(unread)) = (&args.instructions, unread_doc(&input.attrs)) {
            errors.push_spanned(
                unread,
                "#[agent] cannot read a doc comment written by a macro (`#[doc = include_str!(..)]`), and its instructions would lose that text: write the text out in the comment or in `instructions = \"...\"`, or build the agent with `Agent::builder(include_str!(..))`",
            );
        }
        // Refused here rather than when the agent is built (a blank name) or never (blank
        // instructions, which a doc comment may not be either).
        if let Some(name) = args
            .name
            .as_ref()
            .filter(|name| name.value().trim().is_empty())
        {
            errors.push_spanned(name, "#[agent] names cannot be blank");
        }
        if let Some(text) =
            (args.instructions.as_ref()).filter(|text| text.value().trim().is_empty())
        {
            errors.push_spanned(
                text,
                "#[agent] instructions cannot be blank: say what the agent is for",
            );
        }
        let instructions = match (&args.instructions, doc_text(&input.attrs)) {
            (Some(lit), _) => Some(lit.value()),
            (None, Some(doc)) => Some(doc),
            (None, None) => {
                errors.push_spanned(
                    &input.ident,
                    "#[agent] needs instructions: write a doc comment on the struct, or `instructions = \"...\"`",
                );
                None
            }
        };
        let instructions = match (errors.finish(), instructions) {
            (Ok(()), Some(instructions)) => instructions,
            (result, _) => {
                let error = result.err().unwrap_or_else(|| {
                    syn::Error::new_spanned(&input.ident, "#[agent] needs instructions")
                });
                return Err(Box::new(Invalid {
                    error,
                    krate: args.krate,
                    input,
                }));
            }
        };
        let name = args
            .name
            .as_ref()
            .map_or_else(|| to_snake(&unraw(&input.ident)), syn::LitStr::value);
        Ok(Self {
            input,
            args,
            instructions,
            name,
        })
    }
}

/// The struct's name in snake case, with word boundaries where `heck` puts them: before a
/// capital that follows a lowercase letter or a digit, and before the last capital of an
/// acronym that a lowercase letter follows. `HTTPHelper` is `http_helper`, `MyAPI` is
/// `my_api`, `Agent2Go` is `agent2_go`; existing underscores are kept, never doubled.
fn to_snake(ident: &str) -> String {
    let chars: Vec<char> = ident.chars().collect();
    let mut out = String::with_capacity(ident.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_is_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let after_word = prev.is_lowercase() || prev.is_ascii_digit();
            let ends_acronym = prev.is_uppercase() && next_is_lower;
            if after_word || ends_acronym {
                out.push('_');
            }
        }
        out.extend(c.to_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::to_snake;

    #[test]
    fn default_agent_names_are_snake_case_with_acronyms_as_one_word() {
        for (ident, name) in [
            ("Parrot", "parrot"),
            ("ResearchAgent", "research_agent"),
            ("HTTPHelper", "http_helper"),
            ("MyAPI", "my_api"),
            ("MyAPIClient", "my_api_client"),
            ("Agent2Go", "agent2_go"),
            ("V2Agent", "v2_agent"),
            ("Already_Snake", "already_snake"),
            ("A", "a"),
            ("AB", "ab"),
        ] {
            assert_eq!(to_snake(ident), name, "{ident}");
        }
    }
}
