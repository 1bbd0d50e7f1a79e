//! `#[node]`: parse attributes → validate the fn → expand to a unit struct implementing `Node`.

mod attr;
mod expand;
mod model;

use proc_macro2::TokenStream;

use crate::common::with_original;

pub(crate) fn expand_attribute(attr: TokenStream, item: TokenStream) -> TokenStream {
    let result = syn::parse2::<syn::ItemFn>(item.clone()).and_then(|func| {
        let args = attr::NodeArgs::parse(attr)?;
        let model = model::NodeModel::new(args, func)?;
        Ok(expand::expand(&model))
    });
    match result {
        Ok(tokens) => tokens,
        Err(error) => with_original(item, error),
    }
}
