//! This replica's bridged tasks ([`Tasks`]): their ids, their bounds (per replica, per
//! principal), how long each is kept, and the metrics `mrtr_gateway_bridged_tasks` (alive now)
//! and `mrtr_gateway_bridged_tasks_total` (ended, by `outcome`). Imports [`super::task`] and
//! [`super::wire`] of the room.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use tokio::sync::mpsc;
use tower_mrtr::Route;

use super::BridgeConfig;
use super::owner::OwnerSeal;
use super::task::{Task, drive};
use crate::observe::metrics;
use crate::upstream::body::ProxyBody;
use crate::upstream::translate::Asked;

/// The start of every bridged task id, which tells the bridge's ids from a Tasks backend's.
pub(super) const ID_PREFIX: &str = "mrtr-bridged.";

/// Why a task was not created.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Full {
    Replica,
    Principal,
}

#[derive(Debug, Default)]
struct Table {
    tasks: HashMap<Box<str>, Arc<Task>>,
    per_principal: HashMap<Option<Arc<str>>, usize>,
}

/// This replica's bridged tasks; see the [module docs](self).
#[derive(Debug)]
pub(super) struct Tasks {
    pub(super) config: BridgeConfig,
    /// This replica's name in task ids: random, so that a task id names the replica it lives on.
    replica: String,
    /// Seals this replica's URL into its ids, opens other replicas'.
    seal: OwnerSeal,
    table: Mutex<Table>,
}

/// Where a task id says it lives.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Owner<'a> {
    /// Not a bridged task's id.
    None,
    Here,
    /// An earlier process at this replica's own URL (`advertise-url`): it restarted, and its
    /// tasks went with it.
    Restarted,
    /// Another replica, by the name in the id, and the URL it advertised (if it did).
    Elsewhere {
        replica: &'a str,
        url: Option<String>,
    },
}

impl Tasks {
    pub(super) fn new(config: BridgeConfig, seal: OwnerSeal) -> Self {
        Self {
            config,
            seal,
            replica: random_hex(6).unwrap_or_else(|| format!("{:x}", std::process::id())),
            table: Mutex::default(),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Which replica the task id `id` names: `<replica>.<random>`, then its URL sealed
    /// ([`OwnerSeal`]) when the replica advertised one. An id whose URL does not open (not
    /// written by a replica with the keyring, or past its task's life) names none.
    pub(super) fn owner<'a>(&self, id: &'a str) -> Owner<'a> {
        let Some(rest) = id.strip_prefix(ID_PREFIX) else {
            return Owner::None;
        };
        let mut fields = rest.splitn(3, '.');
        let replica = fields.next().unwrap_or_default();
        if replica == self.replica {
            return Owner::Here;
        }
        let Some(sealed) = fields.nth(1) else {
            return Owner::Elsewhere { replica, url: None };
        };
        match self.seal.open(sealed) {
            Some(url) if Some(url.as_str()) == self.config.advertise.as_deref() => Owner::Restarted,
            Some(url) => Owner::Elsewhere {
                replica,
                url: Some(url),
            },
            None => Owner::None,
        }
    }

    /// A new task for `principal` on `route`, with the backend's `first` request outstanding,
    /// registered (so that `tasks/get` finds it) before it is returned; refused (with `first`
    /// back, to be answered) when this replica or the principal holds as many as allowed.
    pub(super) fn create(
        &self,
        principal: Option<Arc<str>>,
        route: Route,
        first: Asked,
    ) -> Result<Arc<Task>, (Full, Asked)> {
        let mut table = self.table();
        if table.tasks.len() >= self.config.max_tasks {
            metrics::bridged_task_ended("refused");
            return Err((Full::Replica, first));
        }
        let mine = table.per_principal.get(&principal).copied().unwrap_or(0);
        if mine >= self.config.max_per_principal {
            metrics::bridged_task_ended("refused");
            return Err((Full::Principal, first));
        }
        let Some(random) = random_hex(16) else {
            return Err((Full::Replica, first));
        };
        let mut id = format!("{ID_PREFIX}{}.{random}", self.replica);
        if let Some(url) = &self.config.advertise {
            let Some(sealed) = self.seal.seal(url, SystemTime::now() + self.config.ttl) else {
                return Err((Full::Replica, first));
            };
            id.push('.');
            id.push_str(&sealed);
        }
        let task = Arc::new(Task::new(id, principal.clone(), route, self.config.ttl, first));
        table.tasks.insert(task.id.clone(), task.clone());
        *table.per_principal.entry(principal).or_default() += 1;
        metrics::bridged_tasks(table.tasks.len());
        Ok(task)
    }

    /// Runs `task` in the background: its driver reads the rest of the backend's answer `body`
    /// and its further requests (`asked`); the task is forgotten once it has kept its outcome
    /// for `result_ttl` (or its life ended).
    pub(super) fn run(
        self: &Arc<Self>,
        task: Arc<Task>,
        body: Pin<Box<ProxyBody>>,
        asked: mpsc::Receiver<Asked>,
    ) {
        let tasks = self.clone();
        tokio::spawn(async move {
            let config = &tasks.config;
            drive(
                task.clone(),
                body,
                asked,
                config.answer_timeout,
                config.max_message,
            )
            .await;
            metrics::bridged_task_ended(task.status().as_str());
            tokio::time::sleep_until(task.forget_at(config.result_ttl).into()).await;
            tasks.forget(&task);
        });
    }

    /// The task `id`, if it is alive on this replica.
    pub(super) fn get(&self, id: &str) -> Option<Arc<Task>> {
        self.table().tasks.get(id).cloned()
    }

    fn forget(&self, task: &Task) {
        let mut table = self.table();
        if table.tasks.remove(&task.id).is_some()
            && let Some(count) = table.per_principal.get_mut(&task.principal)
        {
            *count -= 1;
            if *count == 0 {
                table.per_principal.remove(&task.principal);
            }
        }
        metrics::bridged_tasks(table.tasks.len());
    }
}

/// `bytes` random bytes in hex: task ids must be unguessable (SEP-2663), and the MRTR layer's
/// seal around them is what the client holds.
fn random_hex(bytes: usize) -> Option<String> {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).ok()?;
    Some(buffer.iter().map(|b| format!("{b:02x}")).collect())
}
