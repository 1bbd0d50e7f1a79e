//! `#[agent]`: parse attributes → validate the struct → expand to constructors.

mod attr;
mod expand;
mod model;

use proc_macro2::TokenStream;

use crate::common::with_original;

pub(crate) fn expand_attribute(attr: TokenStream, item: TokenStream) -> TokenStream {
    let result = syn::parse2::<syn::DeriveInput>(item.clone()).and_then(|input| {
        let args = attr::AgentArgs::parse(attr)?;
        let model = model::AgentModel::new(args, input)?;
        Ok(expand::expand(&model))
    });
    match result {
        Ok(tokens) => tokens,
        Err(error) => with_original(item, error),
    }
}
