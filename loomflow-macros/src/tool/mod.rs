//! `#[tool]`: parse attributes → validate the fn → expand to a unit struct implementing `Tool`.

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
    let result = model::ToolModel::new(args, func).map(|model| expand::expand(&model));
    match result {
        Ok(tokens) => tokens,
        Err(error) => with_original(item, error),
    }
}
