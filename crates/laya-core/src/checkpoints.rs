//! The checkpoints a decision can be routed to, and which of them are resident: upstream's
//! `Router` registry, its `load`/`preload`/`unload` and its least-recently-used eviction
//! (`laya/router.py`, spec api.md §8, §10).
//!
//! [`Checkpoints`] is what [`crate::decide::decide`] needs. [`Router`] is upstream's router
//! over any number of checkpoints, building each with a caller's [`Loader`] (the engine is
//! the caller's choice); [`Single`] serves one checkpoint under every name, as `sys1rust serve
//! --model X` does, while still moving the residency order as upstream's router would.

use crate::agent::Agent;
use crate::engine::Forward;
use crate::routing::Checkpoint;

/// A routed checkpoint that could not be loaded (the decision fails with upstream's 500).
#[derive(Debug, thiserror::Error)]
#[error("loading checkpoint {name}: {reason}")]
pub struct LoadError {
    pub name: Checkpoint,
    pub reason: String,
}

/// The checkpoints a decision can be routed to.
pub trait Checkpoints {
    type Forward: Forward;

    /// Upstream's `Router.load`: the agent that answers `name`, built if it is not resident
    /// (evicting the least recently used beyond the cap), and now the most recently used.
    fn agent(&mut self, name: &Checkpoint) -> Result<&mut Agent<Self::Forward>, LoadError>;

    /// The resident checkpoints, least recently used first (`/health` `loaded`).
    fn resident(&self) -> Vec<Resident>;

    /// An identity of the resident agent that answers `name`, the same for every name one
    /// agent answers and for as long as it stays resident; `None` when `name` would have to
    /// be loaded. Neither loads nor moves the residency order.
    fn agent_key(&self, name: &Checkpoint) -> Option<u64>;

    /// The resident agent of `key` ([`Checkpoints::agent_key`]), without moving the
    /// residency order.
    fn peek(&mut self, key: u64) -> Option<&mut Agent<Self::Forward>>;
}

/// What `/health` reports of one resident checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resident {
    pub name: Checkpoint,
    /// The commit it was loaded from (`None` for a local directory).
    pub revision: Option<String>,
    /// Where it computes, in upstream's vocabulary (`cpu`, `cuda`, `mps`).
    pub device: String,
    /// When it was loaded, counting loads: `/health` lists `revisions` in load order.
    pub loaded: u64,
}

/// A checkpoint a [`Loader`] built.
pub struct Loaded<F> {
    pub agent: Agent<F>,
    /// The commit its files come from, `None` for a local directory.
    pub revision: Option<String>,
}

/// Builds the checkpoint registered under a name (download, engine, tokenizer); the error is
/// the cause, which the server logs and answers with upstream's 500.
pub type Loader<F> = Box<dyn FnMut(&Checkpoint) -> Result<Loaded<F>, String>>;

struct Entry<F> {
    name: Checkpoint,
    agent: Agent<F>,
    revision: Option<String>,
    loaded: u64,
}

/// Upstream's router: any number of registered checkpoints, at most `max_loaded` resident.
pub struct Router<F> {
    loader: Loader<F>,
    /// Resident checkpoints, least recently used first (upstream's `_order`).
    resident: Vec<Entry<F>>,
    max_loaded: usize,
    loads: u64,
}

impl<F: Forward> Router<F> {
    /// A router with nothing resident, keeping at most `max_loaded` (at least one).
    pub fn new(loader: Loader<F>, max_loaded: usize) -> Router<F> {
        Router {
            loader,
            resident: Vec::new(),
            max_loaded: max_loaded.max(1),
            loads: 0,
        }
    }

    /// Upstream's `preload`: raises the cap to hold `names` and whatever is resident, then
    /// loads each (a failure stops the preload: the server does not start).
    pub fn preload(&mut self, names: &[Checkpoint]) -> Result<(), LoadError> {
        let mut wanted: Vec<&Checkpoint> = names.iter().collect();
        for e in &self.resident {
            if !wanted.contains(&&e.name) {
                wanted.push(&e.name);
            }
        }
        wanted.dedup();
        self.max_loaded = self.max_loaded.max(wanted.len());
        for name in names {
            self.agent(name)?;
        }
        Ok(())
    }

    /// The resident cap in force.
    pub fn max_loaded(&self) -> usize {
        self.max_loaded
    }

    /// Upstream's `unload()`: nothing resident any more (the idle unload).
    pub fn unload_all(&mut self) {
        self.resident.clear();
    }

    /// The engine of the least recently used resident checkpoint, if any.
    pub fn engine_info(&self) -> Option<crate::engine::EngineInfo> {
        self.resident.first().map(|e| e.agent.forward.info())
    }
}

impl<F: Forward> Checkpoints for Router<F> {
    type Forward = F;

    fn agent(&mut self, name: &Checkpoint) -> Result<&mut Agent<F>, LoadError> {
        if let Some(pos) = self.resident.iter().position(|e| &e.name == name) {
            let entry = self.resident.remove(pos);
            self.resident.push(entry);
        } else {
            let built = (self.loader)(name).map_err(|reason| LoadError {
                name: name.clone(),
                reason,
            })?;
            self.loads += 1;
            self.resident.push(Entry {
                name: name.clone(),
                agent: built.agent,
                revision: built.revision,
                loaded: self.loads,
            });
            // The newest is last, so eviction never takes the checkpoint being returned.
            while self.resident.len() > self.max_loaded {
                let evicted = self.resident.remove(0);
                tracing::info!(checkpoint = %evicted.name, "evicted (least recently used)");
            }
        }
        match self.resident.last_mut() {
            Some(e) => Ok(&mut e.agent),
            None => Err(LoadError {
                name: name.clone(),
                reason: "nothing resident after loading".into(),
            }),
        }
    }

    fn agent_key(&self, name: &Checkpoint) -> Option<u64> {
        // A load's number is never reused, so it names this residency of the checkpoint.
        self.resident
            .iter()
            .find(|e| &e.name == name)
            .map(|e| e.loaded)
    }

    fn peek(&mut self, key: u64) -> Option<&mut Agent<F>> {
        self.resident
            .iter_mut()
            .find(|e| e.loaded == key)
            .map(|e| &mut e.agent)
    }

    fn resident(&self) -> Vec<Resident> {
        self.resident
            .iter()
            .map(|e| Resident {
                name: e.name.clone(),
                revision: e.revision.clone(),
                device: e.agent.forward.info().device,
                loaded: e.loaded,
            })
            .collect()
    }
}

/// One checkpoint answering under every name (`sys1rust serve --model X`): the routing
/// decision is still upstream's, and the residency order moves as upstream's would with all
/// three names preloaded.
pub struct Single<F> {
    pub agent: Agent<F>,
    /// The served commit (`/health` `revisions` of every name).
    pub revision: Option<String>,
    /// The names, least recently used first.
    order: Vec<Checkpoint>,
}

impl<F> Single<F> {
    /// `agent` answering every name, all three preloaded as upstream's default start does.
    pub fn new(agent: Agent<F>, revision: Option<String>) -> Single<F> {
        Single {
            agent,
            revision,
            order: Checkpoint::built_in().to_vec(),
        }
    }
}

impl<F: Forward> Checkpoints for Single<F> {
    type Forward = F;

    fn agent(&mut self, name: &Checkpoint) -> Result<&mut Agent<F>, LoadError> {
        self.order.retain(|c| c != name);
        self.order.push(name.clone());
        Ok(&mut self.agent)
    }

    fn agent_key(&self, _name: &Checkpoint) -> Option<u64> {
        Some(0)
    }

    fn peek(&mut self, key: u64) -> Option<&mut Agent<F>> {
        (key == 0).then_some(&mut self.agent)
    }

    fn resident(&self) -> Vec<Resident> {
        let device = self.agent.forward.info().device;
        // Preloaded in registry order, so that is the load order.
        let load_order = |c: &Checkpoint| {
            Checkpoint::BUILT_IN
                .iter()
                .position(|n| *n == c.name())
                .unwrap_or(0) as u64
        };
        self.order
            .iter()
            .map(|c| Resident {
                name: c.clone(),
                revision: self.revision.clone(),
                device: device.clone(),
                loaded: load_order(c),
            })
            .collect()
    }
}
