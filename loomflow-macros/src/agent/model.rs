//! A validated description of an `#[agent]` struct.

use syn::{Data, DeriveInput};

use super::attr::AgentArgs;
use crate::common::doc_text;

pub(crate) struct AgentModel {
    pub(crate) input: DeriveInput,
    pub(crate) args: AgentArgs,
    pub(crate) instructions: String,
    pub(crate) name: String,
}

impl AgentModel {
    pub(crate) fn new(args: AgentArgs, input: DeriveInput) -> syn::Result<Self> {
        if !matches!(input.data, Data::Struct(_)) {
            return Err(syn::Error::new_spanned(
                &input.ident,
                "#[agent] goes on a struct; its doc comment is the agent's instructions",
            ));
        }
        if !input.generics.params.is_empty() {
            return Err(syn::Error::new_spanned(
                &input.generics,
                "#[agent] structs cannot be generic",
            ));
        }
        let instructions = match (&args.instructions, doc_text(&input.attrs)) {
            (Some(lit), _) => lit.value(),
            (None, Some(doc)) => doc,
            (None, None) => {
                return Err(syn::Error::new_spanned(
                    &input.ident,
                    "#[agent] needs instructions: write a doc comment on the struct, or `instructions = \"...\"`",
                ));
            }
        };
        let name = args
            .name
            .as_ref()
            .map_or_else(|| to_snake(&input.ident.to_string()), syn::LitStr::value);
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
