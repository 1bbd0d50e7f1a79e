//! An agent's tools after it is built: the shared host that [`Agent::add_tool`] and
//! [`Agent::remove_tool`] change, and the hosts of runs given tools of their own.
//!
//! [`Agent::add_tool`]: super::Agent::add_tool
//! [`Agent::remove_tool`]: super::Agent::remove_tool

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use crate::tool::{Tool, ToolHost};

/// The tool hosts of an agent.
pub(crate) struct AgentTools {
    /// The host every run uses, replaced whole when a tool is added or removed, so a turn
    /// that holds it keeps a consistent view.
    shared: RwLock<Arc<ToolHost>>,
    /// The tools of runs going on now with tools of their own, by session, on top of the
    /// agent's.
    per_call: Mutex<HashMap<String, Arc<OnTop>>>,
    /// For a swarm's copy of an agent: the agent's own tools, which it follows, and the
    /// handoff tools it adds to them.
    layered: Option<Layered>,
}

/// Another agent's tools with more on top, kept in step with them.
struct Layered {
    base: Arc<AgentTools>,
    extra: OnTop,
}

/// Tools put on top of a host that may change: composed again when it does.
struct OnTop {
    extra: Vec<Arc<dyn Tool>>,
    /// Whether the tools are a swarm's handoffs, which the host's permission policy allows
    /// unless it has a rule of their own (see [`compose`]).
    handoffs: bool,
    /// The host the last composition was made from, and that composition.
    composed: Mutex<(Arc<ToolHost>, Arc<ToolHost>)>,
}

impl OnTop {
    fn new(base: Arc<ToolHost>, extra: Vec<Arc<dyn Tool>>, handoffs: bool) -> Self {
        let composed = Arc::new(compose(&base, &extra, handoffs));
        Self {
            extra,
            handoffs,
            composed: Mutex::new((base, composed)),
        }
    }

    /// `base` with these tools on top (which win a name clash).
    fn over(&self, base: Arc<ToolHost>) -> Arc<ToolHost> {
        let mut composed = crate::sync::lock(&self.composed);
        if !Arc::ptr_eq(&composed.0, &base) {
            let host = Arc::new(compose(&base, &self.extra, self.handoffs));
            *composed = (base, host);
        }
        Arc::clone(&composed.1)
    }
}

impl std::fmt::Debug for AgentTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.current().fmt(f)
    }
}

impl AgentTools {
    pub(crate) fn new(host: ToolHost) -> Self {
        Self {
            shared: RwLock::new(Arc::new(host)),
            per_call: Mutex::default(),
            layered: None,
        }
    }

    /// `base`'s tools and `extra` (which win a name clash), following `base`: a tool added
    /// to it or removed from it is added or removed here from the next turn on.
    pub(crate) fn layered(base: Arc<AgentTools>, extra: Vec<Arc<dyn Tool>>) -> Self {
        let extra = OnTop::new(base.current(), extra, true);
        Self {
            shared: RwLock::new(extra.over(base.current())),
            per_call: Mutex::default(),
            layered: Some(Layered { base, extra }),
        }
    }

    /// The agent's host as it is now.
    pub(crate) fn current(&self) -> Arc<ToolHost> {
        if let Some(layered) = &self.layered {
            return layered.extra.over(layered.base.current());
        }
        Arc::clone(
            &self
                .shared
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The host a turn of `session`'s run uses: the agent's as it is now, with the run's
    /// own tools on top when it was given some.
    pub(crate) fn for_session(&self, session: &str) -> Arc<ToolHost> {
        let own = crate::sync::lock(&self.per_call).get(session).cloned();
        match own {
            Some(own) => own.over(self.current()),
            None => self.current(),
        }
    }

    /// Changes the agent's host; runs see the change from their next turn. A layered host
    /// changes the host it follows.
    pub(crate) fn update<R>(&self, change: impl FnOnce(&mut ToolHost) -> R) -> R {
        if let Some(layered) = &self.layered {
            return layered.base.update(change);
        }
        let mut shared = self
            .shared
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut host = (**shared).clone();
        let result = change(&mut host);
        *shared = Arc::new(host);
        result
    }

    /// Gives `session`'s run the agent's tools and `extra` (which win a name clash) until
    /// the returned guard is dropped; a tool added to the agent or removed from it meanwhile
    /// is added or removed for the run from its next turn. `None` when there are no extra
    /// tools.
    pub(crate) fn lend(
        self: &Arc<Self>,
        session: &str,
        extra: &[Arc<dyn Tool>],
    ) -> Option<LentTools> {
        if extra.is_empty() {
            return None;
        }
        let own = OnTop::new(self.current(), extra.to_vec(), false);
        crate::sync::lock(&self.per_call).insert(session.to_owned(), Arc::new(own));
        Some(LentTools {
            tools: Arc::clone(self),
            session: session.to_owned(),
        })
    }
}

/// `host` with `extra` added (each replacing a tool of its name).
/// `host` with `extra` on top. A swarm's handoffs act on nothing but the conversation:
/// the host's policy allows them whatever its default or its rule for destructive tools
/// (an agent whose policy asks about every call still hands off), unless it has a rule for
/// the handoff's own name, or a router that decides it.
fn compose(host: &ToolHost, extra: &[Arc<dyn Tool>], handoffs: bool) -> ToolHost {
    let mut host = host.clone();
    for tool in extra {
        match handoffs {
            true => host.add_allowed(Arc::clone(tool)),
            false => host.add_arc(Arc::clone(tool)),
        }
    }
    host
}

/// Takes a run's own tools back when the run ends (or its future is dropped).
pub(crate) struct LentTools {
    tools: Arc<AgentTools>,
    session: String,
}

impl Drop for LentTools {
    fn drop(&mut self) {
        crate::sync::lock(&self.tools.per_call).remove(&self.session);
    }
}
