//! A validated description of a `#[tool]` function.

use proc_macro2::Span;
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{FnArg, Ident, ItemFn, Pat, Type};

use super::attr::ToolArgs;
use crate::common::{doc_text, find_impl_trait, unraw, unread_doc};

/// One parameter of the function, as the generated code passes it.
pub(crate) enum Param {
    /// Injected: the call's `&ToolContext`.
    Context,
    /// Comes from the model's arguments.
    Arg {
        ident: Ident,
        ty: Box<Type>,
        description: Option<String>,
        /// Its `#[serde(..)]`, `#[schemars(..)]` and doc attributes: they go on its field of
        /// the arguments' struct, and not on the fn.
        field_attrs: Vec<syn::Attribute>,
    },
}

pub(crate) struct ToolModel {
    pub(crate) func: ItemFn,
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) approval: bool,
    pub(crate) destructive: bool,
    pub(crate) params: Vec<Param>,
    /// A single argument without a `param(...)` description: when its schema is an object
    /// with properties, the model's arguments are that type itself.
    pub(crate) single_may_be_whole: bool,
    /// Where errors about the return type point.
    pub(crate) output_span: Span,
    pub(crate) krate: Option<syn::Path>,
}

/// A `#[tool]` fn that failed validation: what the fallback expansion still needs.
pub(crate) struct Invalid {
    pub(crate) error: syn::Error,
    pub(crate) func: ItemFn,
    pub(crate) krate: Option<syn::Path>,
}

impl ToolModel {
    /// Validates the attribute and the signature together, so that every problem is reported.
    pub(crate) fn new(mut args: ToolArgs, mut func: ItemFn) -> Result<Self, Box<Invalid>> {
        let mut errors = std::mem::take(&mut args.errors);
        // What only the arguments' struct reads is taken off the fn first, where rustc would
        // know neither `#[serde]` nor a doc comment: also when the tool is refused, so that
        // the fn kept then reports only the real problems.
        let taken = take_field_attrs(&mut func);
        let sig = &func.sig;
        if crate::common::has_type_generics(&sig.generics) {
            errors.push_spanned(
                crate::common::generics_tokens(&sig.generics),
                "#[tool] functions cannot be generic: the argument schema needs concrete types",
            );
        }
        let fn_name = unraw(&sig.ident);
        if matches!(fn_name.as_str(), "schema" | "generator") {
            // The fn becomes a static of its name, which the `JsonSchema` derive's own
            // bindings of these names (the tool's arguments', and any other in the module)
            // cannot shadow.
            errors.push_spanned(
                &sig.ident,
                format_args!(
                    "a #[tool] fn cannot be named `{fn_name}`: the JSON schema derive binds \
                     that name; name the fn otherwise and keep the tool's name with \
                     #[tool(name = \"{fn_name}\")]"
                ),
            );
        }
        if let Some(variadic) = &sig.variadic {
            errors.push_spanned(variadic, "#[tool] functions cannot be variadic");
        }
        if let Some(constness) = &sig.constness {
            errors.push_spanned(constness, "#[tool] functions cannot be `const`");
        }
        if let Some(unsafety) = &sig.unsafety {
            errors.push_spanned(
                unsafety,
                "#[tool] functions cannot be `unsafe`: the model calls them; keep the unsafe \
                 code in a safe fn of your own, with the checks it needs",
            );
        }

        let mut params = Vec::new();
        // Every parameter's name, refused ones too, and the context's: what `param(..)`
        // may be told about, and what it is told.
        let mut declared: Vec<(syn::Ident, bool)> = Vec::new();
        for (input, field_attrs) in sig.inputs.iter().zip(taken) {
            match input {
                FnArg::Receiver(receiver) => errors.push_spanned(
                    receiver,
                    "#[tool] functions cannot take `self`: write a free function, or implement `Tool` by hand",
                ),
                FnArg::Typed(pat_type) => {
                    let context = is_tool_context(&pat_type.ty);
                    if let Pat::Ident(pat) = &*pat_type.pat {
                        declared.push((pat.ident.clone(), context));
                    }
                    if context {
                        // A doc comment on it documents the fn's code, and is left out.
                        if let Some(attr) = field_attrs.iter().find(|a| !a.path().is_ident("doc"))
                        {
                            errors.push_spanned(
                                attr,
                                "the tool's context is not an argument the model gives: it \
                                 takes no #[serde] nor #[schemars]",
                            );
                        }
                        params.push(Param::Context);
                        continue;
                    }
                    if let Some(wrong) = context_not_shared(&pat_type.ty) {
                        errors.push_spanned(
                            wrong,
                            "take the tool's context as `&ToolContext`: it is lent to the \
                             call, not an argument the model gives",
                        );
                        continue;
                    }
                    let ident = match &*pat_type.pat {
                        Pat::Ident(pat) if pat.subpat.is_none() => pat.ident.clone(),
                        other => {
                            errors.push_spanned(
                                other,
                                "#[tool] parameters must be plain names: they are the argument names the model sees",
                            );
                            continue;
                        }
                    };
                    if let Some(impl_trait) = find_impl_trait(&pat_type.ty) {
                        errors.push_spanned(
                            impl_trait,
                            "#[tool] parameters cannot be `impl Trait`: the argument schema needs concrete types",
                        );
                        continue;
                    }
                    if let Some(borrow) = find_borrow(&pat_type.ty) {
                        errors.push_spanned(
                            borrow,
                            "#[tool] parameters are deserialized from the model's arguments and must be owned types (only `&ToolContext` may be a reference, matched by that name, not a renamed import): `String` for `&str`, `Vec<String>` for `Vec<&str>`",
                        );
                        continue;
                    }
                    // `param(..)` first, then the parameter's doc comment, unless the
                    // parameter's own `#[schemars(description = ..)]` says it.
                    let (docs, mut field_attrs): (Vec<_>, Vec<_>) =
                        field_attrs.into_iter().partition(|a| a.path().is_ident("doc"));
                    // A derive's helper (`#[validate]`, `#[garde]`) would be applied by
                    // nothing: said here, rather than by rustc as unknown.
                    field_attrs.retain(|attr| {
                        let shapes = ["serde", "schemars"].iter().any(|n| attr.path().is_ident(n));
                        if !shapes {
                            let name = attr.path().to_token_stream().to_string();
                            errors.push_spanned(
                                attr,
                                format!(
                                    "#[tool] parameters take #[serde(..)], #[schemars(..)] and \
                                     doc comments, not #[{name}]: nothing derives it for the \
                                     arguments. Bound a value with #[schemars(range(..))] or \
                                     #[schemars(length(..))], which the model is told of and \
                                     its arguments are checked against, or check it in the body"
                                ),
                            );
                        }
                        shapes
                    });
                    let described = field_attrs.iter().any(|attr| {
                        attr.path().is_ident("schemars")
                            && attr.meta.to_token_stream().to_string().contains("description")
                    });
                    let param = args.params.iter().find(|(name, _)| unraw(name) == unraw(&ident));
                    if let (true, Some((name, _))) = (described, param) {
                        errors.push_spanned(
                            name,
                            format!(
                                "`{name}` is described twice: by param(..) and by its own \
                                 #[schemars(description)]; keep one"
                            ),
                        );
                    }
                    if let Some(unread) = unread_doc(&docs) {
                        errors.push_spanned(
                            unread,
                            "#[tool] cannot read a parameter's doc comment written by a macro: \
                             write the text out, or use param(..)",
                        );
                    }
                    let description = match described {
                        true => None,
                        false => (param.map(|(_, text)| text.value())).or_else(|| doc_text(&docs)),
                    };
                    for attr in &pat_type.attrs {
                        if configures_out_or_shapes(attr) {
                            errors.push_spanned(
                                attr,
                                "#[tool] parameters cannot be configured out, nor given \
                                 #[serde], #[schemars] or docs by cfg_attr: the arguments the \
                                 model is told of are the fn's parameters, all of them",
                            );
                        }
                    }
                    params.push(Param::Arg {
                        ident,
                        ty: pat_type.ty.clone(),
                        description,
                        field_attrs,
                    });
                }
            }
        }
        // Two parameters the model would name alike (one renamed to the other's name):
        // the arguments could fill only one, and every call would fail.
        let mut wire_names: Vec<String> = Vec::new();
        for param in &params {
            let Param::Arg {
                ident, field_attrs, ..
            } = param
            else {
                continue;
            };
            let wire = serde_rename(field_attrs).unwrap_or_else(|| unraw(ident));
            if wire_names.contains(&wire) {
                errors.push_spanned(
                    ident,
                    format!(
                        "two parameters are the argument `{wire}` the model gives (one by \
                         #[serde(rename)]): rename one"
                    ),
                );
            } else {
                wire_names.push(wire);
            }
        }
        for (name, _) in &args.params {
            match declared
                .iter()
                .find(|(ident, _)| unraw(ident) == unraw(name))
            {
                // A parameter refused above: its own error says why.
                Some((_, false)) => {}
                Some((_, true)) => errors.push_spanned(
                    name,
                    format!(
                        "`{name}` is the tool's context, which the model does not give: \
                         describe the arguments only"
                    ),
                ),
                None => errors.push_spanned(name, format!("no parameter named `{name}`")),
            }
        }

        if let (None, Some(unread)) = (&args.description, unread_doc(&func.attrs)) {
            errors.push_spanned(
                unread,
                "#[tool] cannot read a doc comment written by a macro (`#[doc = include_str!(..)]`), and the description the model sees would lose that text: write it out in `///` lines or in `description = \"...\"`",
            );
        }
        let description = match &args.description {
            Some(text) if text.value().trim().is_empty() => {
                errors.push_spanned(
                    text,
                    "a tool's `description` must not be blank: the model reads it to know what the tool does",
                );
                Some(String::new())
            }
            Some(text) => Some(text.value()),
            None => doc_text(&func.attrs).map(|doc| first_paragraph(&doc)),
        };
        if description.is_none() {
            errors.push_spanned(
                &sig.ident,
                "#[tool] functions need a description for the model: add a doc comment or `#[tool(description = \"...\")]`",
            );
        }
        match &args.name {
            Some(name) if !is_model_name(&name.value()) => errors.push_spanned(name, NAME_RULE),
            None if !is_model_name(&unraw(&sig.ident)) => errors.push_spanned(
                &sig.ident,
                format!("{NAME_RULE}; rename the function or set `#[tool(name = \"...\")]`"),
            ),
            _ => {}
        }
        if let Err(error) = errors.finish() {
            return Err(Box::new(Invalid {
                error,
                krate: args.krate,
                func,
            }));
        }

        let plain_args: Vec<_> = params
            .iter()
            .filter_map(|p| match p {
                Param::Arg {
                    description,
                    field_attrs,
                    ..
                } => Some(description.is_none() && field_attrs.is_empty()),
                Param::Context => None,
            })
            .collect();
        let single_may_be_whole = plain_args == [true];
        let output_span = match &sig.output {
            syn::ReturnType::Default => sig.ident.span(),
            syn::ReturnType::Type(_, ty) => ty.span(),
        };

        Ok(Self {
            name: args.name.map_or_else(|| unraw(&sig.ident), |n| n.value()),
            description: description.unwrap_or_default(),
            approval: args.approval,
            destructive: args.destructive,
            params,
            single_may_be_whole,
            output_span,
            krate: args.krate,
            func,
        })
    }
}

const NAME_RULE: &str =
    "a tool name must be 1 to 64 ASCII letters, digits, `_` or `-`, as model providers require";

/// The names model providers accept: `^[a-zA-Z0-9_-]{1,64}$`.
fn is_model_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `#[cfg(..)]`, or a `#[cfg_attr(..)]` that would make one, or a field attribute the macro
/// would not see: both would make the fn and the arguments' struct disagree.
fn configures_out_or_shapes(attr: &syn::Attribute) -> bool {
    if attr.path().is_ident("cfg") {
        return true;
    }
    if !attr.path().is_ident("cfg_attr") {
        return false;
    }
    // The attributes it would make, after its condition (which may hold a comma of its own:
    // `any(test, doc)`); one that does not parse is taken as a whole.
    let parts = attr.parse_args_with(
        syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
    );
    let inner = match parts {
        Ok(parts) => (parts.iter().skip(1))
            .map(|part| part.to_token_stream().to_string())
            .collect::<Vec<_>>()
            .join(","),
        Err(_) => attr.meta.to_token_stream().to_string(),
    };
    ["cfg", "serde", "schemars", "doc"].iter().any(|name| {
        inner
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .any(|word| word == *name)
    })
}

/// Takes each parameter's attributes that belong on its field of the arguments' struct
/// (`#[serde(default)]`, `#[serde(rename = "q")]`, `#[schemars(..)]`, a doc comment) off
/// the fn, and any other but a lint and `cfg`/`cfg_attr` (which stay, and are checked),
/// to be refused: one list a parameter, in order (empty for `self`).
fn take_field_attrs(func: &mut ItemFn) -> Vec<Vec<syn::Attribute>> {
    let is_field_attr = |attr: &syn::Attribute| {
        !(is_lint(attr) || attr.path().is_ident("cfg") || attr.path().is_ident("cfg_attr"))
    };
    (func.sig.inputs.iter_mut())
        .map(|input| match input {
            FnArg::Typed(pat_type) => {
                let (taken, kept) = std::mem::take(&mut pat_type.attrs)
                    .into_iter()
                    .partition(|attr| is_field_attr(attr));
                pat_type.attrs = kept;
                taken
            }
            FnArg::Receiver(_) => Vec::new(),
        })
        .collect()
}

/// A lint attribute (`#[allow(..)]` and its kin), which a parameter may carry.
fn is_lint(attr: &syn::Attribute) -> bool {
    ["allow", "warn", "deny", "forbid", "expect"]
        .iter()
        .any(|name| attr.path().is_ident(name))
}

/// The name a parameter's `#[serde(rename = "..")]` (or `rename(deserialize = "..")`) gives
/// it to read the model's arguments by, if it has one.
fn serde_rename(attrs: &[syn::Attribute]) -> Option<String> {
    let mut renamed = None;
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("serde")) {
        // Whatever else it says is serde's to judge.
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") && meta.input.peek(syn::token::Paren) {
                let _ = meta.parse_nested_meta(|inner| {
                    let value = inner.value()?.parse::<syn::LitStr>()?;
                    if inner.path.is_ident("deserialize") {
                        renamed = Some(value.value());
                    }
                    Ok(())
                });
            } else if meta.path.is_ident("rename")
                && let Ok(value) = meta.value()
                && let Ok(name) = value.parse::<syn::LitStr>()
            {
                renamed = Some(name.value());
            } else if meta.input.peek(syn::Token![=]) {
                let _ = meta.value()?.parse::<syn::Expr>();
            } else if meta.input.peek(syn::token::Paren) {
                let _ = meta.parse_nested_meta(|_| Ok(()));
            }
            Ok(())
        });
    }
    renamed
}

/// `ToolContext` taken by value or as `&mut`: the type, to point at.
fn context_not_shared(ty: &Type) -> Option<&Type> {
    let named = |ty: &Type| match crate::common::ungrouped(ty) {
        Type::Path(path) => (path.path.segments.last()).is_some_and(|s| s.ident == "ToolContext"),
        _ => false,
    };
    match crate::common::ungrouped(ty) {
        Type::Reference(reference) if reference.mutability.is_some() => {
            named(&reference.elem).then_some(ty)
        }
        other => named(other).then_some(ty),
    }
}

/// `&ToolContext` (any path ending in `ToolContext`), shared, not mutable.
fn is_tool_context(ty: &Type) -> bool {
    match crate::common::ungrouped(ty) {
        Type::Reference(reference) if reference.mutability.is_none() => {
            match crate::common::ungrouped(&reference.elem) {
                Type::Path(path) => path
                    .path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "ToolContext" && s.arguments.is_none()),
                _ => false,
            }
        }
        _ => false,
    }
}

/// The first paragraph of a doc comment, its lines joined by spaces.
fn first_paragraph(doc: &str) -> String {
    doc.split("\n\n")
        .next()
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The first borrow anywhere in a parameter's type: a reference (`&str`, `Vec<&str>`), a
/// lifetime other than `'static` (`Cow<'a, str>`), or a `Cow` without one (`Cow<str>`).
/// The arguments struct the macro declares owns what it deserializes, so rustc would report
/// a missing lifetime inside the expansion instead.
fn find_borrow(ty: &Type) -> Option<&dyn quote::ToTokens> {
    match ty {
        Type::Reference(reference) => Some(reference),
        Type::Array(t) => find_borrow(&t.elem),
        Type::Group(t) => find_borrow(&t.elem),
        Type::Paren(t) => find_borrow(&t.elem),
        Type::Slice(t) => find_borrow(&t.elem),
        Type::Tuple(t) => t.elems.iter().find_map(find_borrow),
        Type::Path(t) => {
            let last = t.path.segments.last()?;
            let lifetimes = || match &last.arguments {
                syn::PathArguments::AngleBracketed(args) => args
                    .args
                    .iter()
                    .any(|arg| matches!(arg, syn::GenericArgument::Lifetime(_))),
                _ => false,
            };
            if last.ident == "Cow" && !lifetimes() {
                return Some(t);
            }
            t.path
                .segments
                .iter()
                .find_map(|segment| match &segment.arguments {
                    syn::PathArguments::AngleBracketed(args) => {
                        args.args.iter().find_map(|arg| match arg {
                            syn::GenericArgument::Lifetime(l) if l.ident != "static" => {
                                Some(l as &dyn quote::ToTokens)
                            }
                            syn::GenericArgument::Type(ty) => find_borrow(ty),
                            _ => None,
                        })
                    }
                    _ => None,
                })
        }
        _ => None,
    }
}
