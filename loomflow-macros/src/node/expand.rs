//! Code generation for `#[node]`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};

use super::model::NodeModel;
use crate::common::crate_path;

pub(crate) fn expand(model: &NodeModel) -> TokenStream {
    let krate = crate_path(model.krate.as_ref());
    let func = &model.func;
    let vis = &func.vis;
    let ident = &func.sig.ident;
    let (doc_attrs, other_attrs): (Vec<_>, Vec<_>) =
        func.attrs.iter().partition(|a| a.path().is_ident("doc"));
    let mut sig = func.sig.clone();
    sig.ident = syn::Ident::new("call", ident.span());
    let block = &func.block;
    let name = &model.name;
    let state_ty = &model.state_ty;
    let markers = &model.markers;
    let description = match &model.description {
        Some(text) => quote!(::core::option::Option::Some(#text)),
        None => quote!(::core::option::Option::None),
    };
    let call = if model.takes_context {
        quote!(#ident::call(state, ctx))
    } else {
        quote!({
            let _ = ctx;
            #ident::call(state)
        })
    };

    let convert = quote_spanned! {model.output_span=>
        #krate::__private::IntoNodeResult::into_node_result(output)
    };

    quote! {
        #(#doc_attrs)*
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, Default)]
        #vis struct #ident;

        const _: () = {
            impl #ident {
                /// The node's body, callable directly.
                #[allow(dead_code)]
                #(#other_attrs)*
                #vis #sig #block
            }

            impl #krate::Node<#state_ty> for #ident {
                fn name(&self) -> &str {
                    #name
                }

                fn description(&self) -> ::core::option::Option<&str> {
                    #description
                }

                fn markers(&self) -> &[&'static str] {
                    &[#(#markers),*]
                }

                fn run<'a>(
                    &'a self,
                    state: &'a mut #state_ty,
                    ctx: &'a #krate::Context,
                ) -> #krate::__private::BoxFuture<'a, #krate::__private::NodeResult> {
                    ::std::boxed::Box::pin(async move {
                        let output = #call.await;
                        #convert
                    })
                }
            }
        };
    }
}
