//! `#[agent]`: parse attributes → validate the struct → expand to constructors.

mod attr;
mod expand;
mod model;

use proc_macro2::TokenStream;

use crate::common::with_original;

pub(crate) fn expand_attribute(attr: TokenStream, item: TokenStream) -> TokenStream {
    let input = match syn::parse2::<syn::DeriveInput>(item.clone()) {
        Ok(input) => input,
        Err(error) => return with_original(item, error),
    };
    // Attribute and item errors are reported together.
    let args = attr::AgentArgs::parse(attr);
    match model::AgentModel::new(args, input) {
        Ok(model) => expand::expand(&model),
        Err(invalid) => expand::fallback(&invalid),
    }
}
