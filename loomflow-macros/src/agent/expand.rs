//! Code generation for `#[agent]`.

use proc_macro2::TokenStream;
use quote::quote;

use super::model::{AgentModel, Invalid};
use crate::common::crate_path;

pub(crate) fn expand(model: &AgentModel) -> TokenStream {
    let krate = crate_path(model.args.krate.as_ref());
    let input = &model.input;
    let ident = &input.ident;
    let instructions = &model.instructions;
    let name = &model.name;
    let mut settings = Vec::new();
    if let Some(m) = &model.args.model {
        settings.push(quote!(.model_name(#m)));
    }
    for tool in &model.args.tools {
        settings.push(quote!(.tool(#tool)));
    }
    if let Some(n) = &model.args.max_turns {
        settings.push(quote!(.max_turns(#n)));
    }
    if let Some(t) = &model.args.timeout_secs {
        settings.push(quote!(.timeout(::core::time::Duration::from_secs(#t))));
    }
    if let Some(t) = &model.args.temperature {
        settings.push(quote!(.temperature(#t)));
    }
    if let Some(n) = &model.args.max_tokens {
        settings.push(quote!(.max_tokens(#n)));
    }
    quote! {
        #input

        const _: () = {
            impl #ident {
                /// The agent's builder with everything the attribute set; add a runtime,
                /// permissions or hooks, then `build()`.
                #[allow(dead_code)]
                pub fn builder() -> #krate::agent::AgentBuilder {
                    #krate::agent::Agent::builder(#instructions)
                        .name(#name)
                        #(#settings)*
                }

                /// Builds the agent as the attribute describes it.
                ///
                /// # Errors
                ///
                /// As `AgentBuilder::build`: every configuration problem.
                #[allow(dead_code)]
                pub fn agent() -> #krate::Result<#krate::agent::Agent> {
                    Self::builder().build()
                }
            }
        };
    }
}

/// On a validation error: the errors, plus the item and constructors whose bodies never run
/// (the crate does not compile), so that `Name::agent()` elsewhere adds no follow-on errors.
pub(crate) fn fallback(invalid: &Invalid) -> TokenStream {
    let krate = crate_path(invalid.krate.as_ref());
    let input = &invalid.input;
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let errors = invalid.error.to_compile_error();
    quote! {
        #input

        const _: () = {
            impl #impl_generics #ident #ty_generics #where_clause {
                #[allow(dead_code)]
                pub fn builder() -> #krate::agent::AgentBuilder {
                    ::core::unreachable!("#[agent] reported a compile error")
                }

                #[allow(dead_code)]
                pub fn agent() -> #krate::Result<#krate::agent::Agent> {
                    ::core::unreachable!("#[agent] reported a compile error")
                }
            }
        };

        #errors
    }
}
