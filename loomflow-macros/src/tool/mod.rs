//! `#[tool]`: parse attributes → validate the fn → expand to a unit value implementing `Tool`.

mod attr;
mod expand;
mod model;

use proc_macro2::TokenStream;

use crate::common::with_original;

pub(crate) fn expand_attribute(attr: TokenStream, item: TokenStream) -> TokenStream {
    let func = match syn::parse2::<syn::ItemFn>(item.clone()) {
        Ok(func) => func,
        Err(error) => return with_original(item, error),
    };
    // Attribute and signature errors are reported together.
    let args = attr::ToolArgs::parse(attr);
    match model::ToolModel::new(args, func) {
        Ok(model) => expand::expand(&model),
        Err(invalid) => expand::fallback(&invalid),
    }
}
