//! Re-reading the pins file (`[pinning] file`) while the gateway runs, as the keys file is
//! (`reload.rs`): on SIGHUP, and whenever its content changes (checked every
//! `--reload-interval`). A file that does not parse changes nothing: the pins in use stay, and
//! the log says why, once per bad content. Editing the file is how an operator re-pins a
//! definition that changed, or pins a new one held under `unpinned = "hold"`.

use std::sync::Arc;
use std::time::Duration;

use super::reload::Reloads;
use crate::route::pins::Pins;

/// Re-reads `pins`' file on SIGHUP and every `interval`, until the task is aborted.
pub(crate) async fn watch(pins: Arc<Pins>, interval: Duration) {
    let Some(path) = pins.file().map(|p| p.display().to_string()) else {
        return;
    };
    let mut reloads = Reloads::start(interval).await;
    loop {
        reloads.next().await;
        match pins.reload() {
            Ok(true) => tracing::info!(file = %path, "pins reloaded"),
            Ok(false) => {}
            Err(error) => tracing::error!(%error, "pins reload failed; the pins in use stay"),
        }
    }
}
