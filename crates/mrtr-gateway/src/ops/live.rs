//! What a config reload swaps while the gateway serves: the [`Proxy`] (its backends, its
//! `[[policy]]` and its `[[rate-limit]]`s), held in one cell ([`Proxies`]) and read once per
//! request by [`Live`], the service the MRTR layer wraps. The composition root builds each new
//! proxy from the old one (unchanged backends keep their doors, unchanged limits their counts)
//! and stores it here; `readiness.rs` reads the backends from the same cell.
//!
//! A request holds the proxy it was handed until its answer's head is out: it finishes on the
//! configuration it started with, and the old proxy goes when the last such request ends.

use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use tower_service::Service;

use crate::route::Proxy;

/// The proxy in use, replaced whole by a reload.
pub(crate) type Proxies = Arc<ArcSwap<Proxy>>;

/// The proxy in use as a service, the innermost of the stack ([`crate::McpStack`]): each
/// request goes to the proxy in use when it arrives. Without a config file to reload, the proxy
/// is fixed and no cell is read. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Live(Current);

#[derive(Clone, Debug)]
enum Current {
    Fixed(Proxy),
    Swapped(Proxies),
}

impl Live {
    /// The proxy `proxies` holds: read per request when `reloadable`, else once, now.
    pub(crate) fn new(proxies: Proxies, reloadable: bool) -> Self {
        Self(match reloadable {
            true => Current::Swapped(proxies),
            false => Current::Fixed(Proxy::clone(&proxies.load())),
        })
    }
}

impl<R> Service<R> for Live
where
    Proxy: Service<R>,
{
    type Response = <Proxy as Service<R>>::Response;
    type Error = <Proxy as Service<R>>::Error;
    type Future = <Proxy as Service<R>>::Future;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The proxy is always ready (it answers every request itself).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: R) -> Self::Future {
        match &mut self.0 {
            Current::Fixed(proxy) => proxy.call(request),
            Current::Swapped(proxies) => Proxy::clone(&proxies.load()).call(request),
        }
    }
}
