//! A validated description of an `#[agent]` struct.

use syn::{Data, DeriveInput};

use super::attr::AgentArgs;
use crate::common::{doc_text, unraw};

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

fn to_snake(ident: &str) -> String {
    let mut out = String::with_capacity(ident.len() + 4);
    for (i, c) in ident.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
