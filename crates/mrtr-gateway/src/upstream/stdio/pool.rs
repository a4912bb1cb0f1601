//! Which of a backend's processes serves a request ([`Processes`]): the one every client
//! shares, or, for a backend run per principal ([`StdioCommand::per_principal`]), the
//! principal's own.
//!
//! A principal's process is started by its first request, and kept while it is used. At most
//! the configured number run at once: a new principal's request stops the one idle longest, and
//! is refused when every one is busy. A process with no call or listen for the idle timeout is
//! stopped by the health probe's round ([`Processes::take_idle`]). One more process serves what
//! has no principal: the health probe's requests (and a request without one, where the MRTR
//! layer does not refuse it).
//!
//! The process every principal shares (that of a backend not run per principal) gives each
//! principal at most a share of its places ([`StdioCommand::max_calls_per_principal`], a quarter
//! by default), requests without a principal being one group with the same share once
//! principals come (see `conn::Shares`). A principal's own process, and the one that serves only
//! what has no principal, have no share: no one else uses them.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::conn::DEFAULT_CALLS_PER_PRINCIPAL;
use super::process::Process;
use crate::upstream::answer::UpstreamError;
use crate::upstream::backend::Backend;
use crate::upstream::backend::StdioCommand;

/// One stdio backend's processes; see the [module docs](self).
#[derive(Debug)]
pub(super) struct Processes {
    shared: Arc<Process>,
    principals: Option<Principals>,
}

#[derive(Debug)]
struct Principals {
    max: usize,
    by: Mutex<HashMap<Box<str>, Arc<Process>>>,
}

impl Processes {
    /// The (not yet started) processes of `backend`, if it is a stdio backend.
    pub(super) fn new(backend: &Backend) -> Option<Self> {
        let command = backend.command()?;
        let principals = command.processes_per_principal().map(|max| Principals {
            max: max.get(),
            by: Mutex::new(HashMap::new()),
        });
        // Shared by the principals unless each has its own.
        let share = principals.is_none().then(|| {
            command
                .max_calls_per_principal()
                .unwrap_or(DEFAULT_CALLS_PER_PRINCIPAL)
        });
        Some(Self {
            shared: Arc::new(process_of(backend, command, share)),
            principals,
        })
    }

    /// The process of requests without a principal of their own (every request's, unless the
    /// backend runs one per principal), which the health probe reports on.
    pub(super) fn shared(&self) -> &Arc<Process> {
        &self.shared
    }

    /// The process for a request of `principal` to `backend`, started if it must be; when the
    /// bound is reached, the process idle longest is stopped for it, in the background.
    pub(super) fn for_principal(
        &self,
        backend: &Backend,
        principal: Option<&str>,
    ) -> Result<Arc<Process>, UpstreamError> {
        let (Some(principals), Some(principal), Some(command)) =
            (&self.principals, principal, backend.command())
        else {
            self.shared.touch();
            return Ok(self.shared.clone());
        };
        let (process, evicted) = {
            let mut by = principals.by.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(process) = by.get(principal) {
                process.touch();
                return Ok(process.clone());
            }
            let mut evicted = None;
            if by.len() >= principals.max {
                let idle = by
                    .iter()
                    .filter(|(_, p)| !p.busy())
                    .min_by_key(|(_, p)| p.last_used())
                    .map(|(k, _)| k.clone());
                let Some(idle) = idle else {
                    return Err(UpstreamError::Unreachable(format!(
                        "all {} processes of this backend are busy with other principals",
                        principals.max
                    )));
                };
                evicted = by.remove(&idle);
            }
            let process = Arc::new(process_of(backend, command, None).alone());
            by.insert(principal.into(), process.clone());
            (process, evicted)
        };
        if let Some(evicted) = evicted {
            tracing::info!(
                backend = backend.name(),
                "stopping the idlest principal's process for another principal"
            );
            tokio::spawn(async move { evicted.stop_and_wait().await });
        }
        Ok(process)
    }

    /// The principals' processes idle for `idle` or longer, taken out (to be stopped).
    pub(super) fn take_idle(&self, idle: Duration) -> Vec<Arc<Process>> {
        let Some(principals) = &self.principals else {
            return Vec::new();
        };
        let mut by = principals.by.lock().unwrap_or_else(|e| e.into_inner());
        let expired: Vec<Box<str>> = by
            .iter()
            .filter(|(_, p)| !p.busy() && p.last_used().elapsed() >= idle)
            .map(|(k, _)| k.clone())
            .collect();
        expired.iter().filter_map(|k| by.remove(k)).collect()
    }

    /// Every process: the shared one, then the principals'.
    pub(super) fn all(&self) -> Vec<Arc<Process>> {
        let mut all = vec![self.shared.clone()];
        if let Some(principals) = &self.principals {
            let by = principals.by.lock().unwrap_or_else(|e| e.into_inner());
            all.extend(by.values().cloned());
        }
        all
    }
}

fn process_of(backend: &Backend, command: &StdioCommand, share: Option<NonZeroUsize>) -> Process {
    Process::new(backend.name(), command.clone(), backend.era(), share)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(max: Option<usize>) -> Backend {
        let mut command = StdioCommand::new(["true"]).unwrap();
        if let Some(max) = max {
            command = command.per_principal(NonZeroUsize::new(max).unwrap());
        }
        Backend::stdio("local", command).unwrap()
    }

    #[tokio::test]
    async fn each_principal_gets_its_own_process_up_to_the_bound_and_the_idlest_makes_room() {
        let backend = backend(Some(2));
        let processes = Processes::new(&backend).unwrap();
        let alice = processes.for_principal(&backend, Some("alice")).unwrap();
        let bob = processes.for_principal(&backend, Some("bob")).unwrap();
        assert!(!Arc::ptr_eq(&alice, &bob));
        assert!(Arc::ptr_eq(
            &alice,
            &processes.for_principal(&backend, Some("alice")).unwrap()
        ));
        let nobody = processes.for_principal(&backend, None).unwrap();
        assert!(
            Arc::ptr_eq(&nobody, processes.shared()),
            "no principal: the shared process"
        );
        // Bob was used last: alice's process (the idlest) makes room for carol's.
        processes.for_principal(&backend, Some("bob")).unwrap();
        let carol = processes.for_principal(&backend, Some("carol")).unwrap();
        assert!(!Arc::ptr_eq(&carol, &alice));
        let again = processes.for_principal(&backend, Some("alice")).unwrap();
        assert!(!Arc::ptr_eq(&again, &alice), "alice's first process was stopped");
        assert_eq!(processes.all().len(), 3, "the shared one and two principals'");
        // Busy processes are not taken for another principal.
        let _calls = [&carol, &again].map(|p| p.in_flight.clone().try_acquire_owned().unwrap());
        assert!(processes.for_principal(&backend, Some("dave")).is_err());
        drop(_calls);
        assert_eq!(processes.take_idle(Duration::ZERO).len(), 2);
        assert_eq!(processes.all().len(), 1);
    }

    #[test]
    fn a_shared_backend_has_one_process_for_everyone() {
        let backend = backend(None);
        let processes = Processes::new(&backend).unwrap();
        let alice = processes.for_principal(&backend, Some("alice")).unwrap();
        assert!(Arc::ptr_eq(&alice, processes.shared()));
        assert!(processes.take_idle(Duration::ZERO).is_empty());
    }

    #[test]
    fn only_a_stdio_process_principals_share_gives_each_a_share_of_its_places() {
        // Shared: a quarter of the places each by default, or what the backend says.
        let backend = backend(None);
        let shared = Processes::new(&backend).unwrap().shared().clone();
        let alice: Vec<_> = (0..16).map(|_| shared.share(Some("alice")).unwrap()).collect();
        assert!(alice.iter().all(Option::is_some));
        assert_eq!(shared.share(Some("alice")).err(), Some(16));
        assert!(matches!(shared.share(Some("bob")), Ok(Some(_))));
        assert!(matches!(shared.share(None), Ok(Some(_))));
        let command = StdioCommand::new(["true"])
            .unwrap()
            .with_max_calls_per_principal(NonZeroUsize::new(2).unwrap());
        let backend = Backend::stdio("local", command).unwrap();
        let shared = Processes::new(&backend).unwrap().shared().clone();
        let _two = [shared.share(Some("alice")), shared.share(Some("alice"))];
        assert_eq!(shared.share(Some("alice")).err(), Some(2));
        let _two = [shared.share(None), shared.share(None)];
        assert_eq!(shared.share(None).err(), Some(2));
        // Per principal: each process has one user, so no share.
        let backend = self::backend(Some(2));
        let processes = Processes::new(&backend).unwrap();
        let alice = processes.for_principal(&backend, Some("alice")).unwrap();
        for process in [&alice, processes.shared()] {
            let held: Vec<_> = (0..64).map(|_| process.share(Some("alice")).unwrap()).collect();
            assert!(held.iter().all(Option::is_none));
        }
    }
}
