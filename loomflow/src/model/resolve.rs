//! Model strings: `"gpt-4o"`, `"claude-sonnet-4-5"`, `"openai-compatible:NAME@URL"`, … to an
//! adapter.

use std::sync::Arc;

#[cfg(feature = "anthropic")]
use super::AnthropicModel;
#[cfg(feature = "openai")]
use super::OpenAiModel;
use super::{ApiKey, EchoModel, Model, ModelError};

/// The forms [`resolve`] accepts, as listed in [`ModelError::UnknownModel`].
pub const ACCEPTED_FORMS: &[&str] = &[
    "gpt-*, chatgpt-*, o1*, o3*, o4*… (OpenAI)",
    "openai:NAME (OpenAI)",
    "claude-* (Anthropic)",
    "anthropic:NAME (Anthropic)",
    "openai-compatible:NAME@http://HOST:PORT/v1 (any OpenAI-compatible server)",
    "anthropic-compatible:NAME@http://HOST:PORT (any Anthropic-compatible server)",
    "echo (the in-process echo model)",
];

/// Which adapter a model string names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Provider {
    /// OpenAI Chat Completions ([`OpenAiModel`]).
    OpenAi,
    /// Anthropic Messages ([`AnthropicModel`]).
    Anthropic,
    /// [`EchoModel`].
    Echo,
}

impl Provider {
    /// The cargo feature of loomflow that provides the adapter (`""` for built-in ones).
    pub fn feature(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::Echo => "",
        }
    }

    /// Whether this build of loomflow has the adapter (its cargo feature is on).
    pub(crate) fn is_built_in(self) -> bool {
        match self {
            Self::OpenAi => cfg!(feature = "openai"),
            Self::Anthropic => cfg!(feature = "anthropic"),
            Self::Echo => true,
        }
    }
}

/// A parsed model string.
///
/// # Examples
///
/// ```
/// use loomflow::model::{ModelSpec, Provider};
///
/// let spec = ModelSpec::parse("openai-compatible:smollm2@http://127.0.0.1:8080/v1")?;
/// assert_eq!(spec.provider, Provider::OpenAi);
/// assert_eq!(spec.model, "smollm2");
/// assert_eq!(spec.base_url.as_deref(), Some("http://127.0.0.1:8080/v1"));
///
/// let err = ModelSpec::parse("llama-3").unwrap_err();
/// assert!(err.to_string().contains("accepted forms"));
/// # Ok::<_, loomflow::model::ModelError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelSpec {
    /// The adapter.
    pub provider: Provider,
    /// The model name sent to the provider.
    pub model: String,
    /// A base URL other than the provider's own.
    pub base_url: Option<String>,
}

/// The base URL without credentials (see `endpoint`).
impl std::fmt::Debug for ModelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSpec")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field(
                "base_url",
                &self.base_url.as_deref().map(super::without_credentials),
            )
            .finish()
    }
}

impl ModelSpec {
    /// Parses a model string.
    ///
    /// # Errors
    ///
    /// [`ModelError::UnknownModel`], listing [`ACCEPTED_FORMS`], when it matches none.
    pub fn parse(given: &str) -> Result<Self, ModelError> {
        let spec = |provider, model: &str, base_url: Option<&str>| Self {
            provider,
            model: model.to_owned(),
            base_url: base_url.map(str::to_owned),
        };
        let s = given.trim();
        if let Some(rest) = s.strip_prefix("openai-compatible:") {
            if let Some((model, url)) = split_at_url(rest) {
                return Ok(spec(Provider::OpenAi, model, Some(url)));
            }
        } else if let Some(rest) = s.strip_prefix("anthropic-compatible:") {
            if let Some((model, url)) = split_at_url(rest) {
                return Ok(spec(Provider::Anthropic, model, Some(url)));
            }
        } else if let Some(model) = s.strip_prefix("openai:").filter(|m| !m.is_empty()) {
            return Ok(spec(Provider::OpenAi, model, None));
        } else if let Some(model) = s.strip_prefix("anthropic:").filter(|m| !m.is_empty()) {
            return Ok(spec(Provider::Anthropic, model, None));
        } else if s == "echo" {
            return Ok(spec(Provider::Echo, s, None));
        } else if s.starts_with("claude-") {
            return Ok(spec(Provider::Anthropic, s, None));
        } else if s.starts_with("gpt-") || s.starts_with("chatgpt-") || is_o_series(s) {
            return Ok(spec(Provider::OpenAi, s, None));
        }
        Err(ModelError::UnknownModel {
            given: shown_spec(given),
            accepted: ACCEPTED_FORMS.iter().map(|f| (*f).to_owned()).collect(),
        })
    }

    /// Builds the adapter, with `key` or the provider's environment variable.
    ///
    /// # Errors
    ///
    /// As the adapters' `build`: a missing key for the provider's own API, a bad base URL;
    /// [`ModelError::ProviderDisabled`] when the provider's cargo feature is off.
    pub fn build(&self, key: Option<ApiKey>) -> Result<Arc<dyn Model>, ModelError> {
        #[cfg(not(all(feature = "openai", feature = "anthropic")))]
        let _ = &key;
        Ok(match self.provider {
            #[cfg(feature = "openai")]
            Provider::OpenAi => {
                let mut builder = OpenAiModel::builder(&self.model);
                if let Some(url) = &self.base_url {
                    builder = builder.base_url(url);
                }
                if let Some(key) = key {
                    builder = builder.api_key(key);
                }
                Arc::new(builder.build()?)
            }
            #[cfg(feature = "anthropic")]
            Provider::Anthropic => {
                let mut builder = AnthropicModel::builder(&self.model);
                if let Some(url) = &self.base_url {
                    builder = builder.base_url(url);
                }
                if let Some(key) = key {
                    builder = builder.api_key(key);
                }
                Arc::new(builder.build()?)
            }
            Provider::Echo => Arc::new(EchoModel::new()),
            #[allow(unreachable_patterns)] // reachable when a provider's feature is off
            provider => {
                return Err(ModelError::ProviderDisabled {
                    model: self.model.clone(),
                    feature: provider.feature(),
                });
            }
        })
    }
}

/// `o1`, `o3-mini`, `o4-mini`…: an `o` followed by a digit.
fn is_o_series(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next() == Some('o') && chars.next().is_some_and(|c| c.is_ascii_digit())
}

/// `NAME@http(s)://…` into the name and the URL, at the first `@http://` or `@https://` (a
/// URL may hold another further on, in its query).
fn split_at_url(rest: &str) -> Option<(&str, &str)> {
    let at = [rest.find("@http://"), rest.find("@https://")]
        .into_iter()
        .flatten()
        .min()?;
    let (model, url) = (&rest[..at], &rest[at + 1..]);
    (!model.is_empty()).then_some((model, url))
}

/// Resolves a model string to an adapter, with the key from the environment
/// (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`).
///
/// # Errors
///
/// [`ModelError::UnknownModel`] listing the accepted forms; [`ModelError::MissingApiKey`] when
/// the provider's own API is named and its variable is unset.
///
/// # Examples
///
/// ```
/// let model = loomflow::model::resolve("echo")?;
/// assert_eq!(model.name(), "echo");
/// assert!(loomflow::model::resolve("mistral-large").is_err());
/// # Ok::<_, loomflow::model::ModelError>(())
/// ```
pub fn resolve(model: &str) -> Result<Arc<dyn Model>, ModelError> {
    ModelSpec::parse(model)?.build(None)
}

/// Resolves a model string to an adapter that uses `key`.
///
/// # Errors
///
/// As [`resolve`].
pub fn resolve_with_key(model: &str, key: impl Into<ApiKey>) -> Result<Arc<dyn Model>, ModelError> {
    ModelSpec::parse(model)?.build(Some(key.into()))
}

/// A model string as an error shows it: a base URL in it keeps its credentials and its
/// query's values to itself, and so does one given without a scheme (`…@gw/v1?key=…`, the
/// usual way to write one that does not resolve). What follows an `@` that reads as no URL
/// (a model's version, `claude@20240620`) is shown.
fn shown_spec(given: &str) -> String {
    if given.contains("://") {
        return super::without_credentials(given);
    }
    match given.split_once('@') {
        Some((before, after)) if after.contains(['/', '?', ':', '.']) => {
            format!("{before}@<redacted>")
        }
        _ => given.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_resolve_to_providers() {
        for (given, provider, model) in [
            ("gpt-4o", Provider::OpenAi, "gpt-4o"),
            ("o3-mini", Provider::OpenAi, "o3-mini"),
            ("o1", Provider::OpenAi, "o1"),
            ("openai:ft:custom", Provider::OpenAi, "ft:custom"),
            ("claude-opus-4-1", Provider::Anthropic, "claude-opus-4-1"),
            ("anthropic:claude-x", Provider::Anthropic, "claude-x"),
            ("echo", Provider::Echo, "echo"),
        ] {
            let spec = ModelSpec::parse(given).unwrap();
            assert_eq!(
                (spec.provider, spec.model.as_str()),
                (provider, model),
                "{given}"
            );
            assert_eq!(spec.base_url, None);
        }
        let spec = ModelSpec::parse("anthropic-compatible:m@https://h:1").unwrap();
        assert_eq!(spec.base_url.as_deref(), Some("https://h:1"));
        // The first URL is the base, whatever its scheme; a later one is part of it.
        let spec = ModelSpec::parse("openai-compatible:m@https://gw/v1?next=@http://x").unwrap();
        assert_eq!(spec.model, "m");
        assert_eq!(
            spec.base_url.as_deref(),
            Some("https://gw/v1?next=@http://x")
        );
    }

    #[test]
    fn unknown_strings_list_the_accepted_forms() {
        for given in [
            "",
            "omni",
            "llama3",
            "openai-compatible:x",
            "openai-compatible:@http://h",
        ] {
            let err = ModelSpec::parse(given).unwrap_err();
            let text = err.to_string();
            assert!(text.contains("claude-*"), "{text}");
            assert!(text.contains("openai-compatible:NAME@"), "{text}");
        }
        // A base URL in a string that does not resolve is not shown, with a scheme or not.
        for given in [
            "nope:m@https://ada:pw@gw/v1?key=s3cret",
            "openai-compatible:m@gw.example/v1?key=s3cret",
            "openai-compatible:m@ada:s3cret@gw/v1",
        ] {
            let text = ModelSpec::parse(given).unwrap_err().to_string();
            assert!(!text.contains("s3cret") && !text.contains("pw@"), "{text}");
        }
        let text = ModelSpec::parse("omni@20240620").unwrap_err().to_string();
        assert!(text.contains("omni@20240620"), "{text}");
    }

    #[test]
    #[cfg(feature = "openai")]
    fn explicit_key_is_used_and_never_printed() {
        let model = resolve_with_key("gpt-4o", "sk-do-not-print").unwrap();
        assert_eq!(model.name(), "openai:gpt-4o");
        assert!(!format!("{model:?}").contains("sk-do-not-print"));
    }
}
