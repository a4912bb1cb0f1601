//! `mrtr-gateway pin --config FILE`: lists every configured backend's tools, prompts and resource
//! templates, as the gateway would (each backend's era found first, then every page), and prints
//! their pins as a pins file (`route/pins.rs`) for `[pinning] file`. What a backend could not
//! list is said on stderr; the command fails only when nothing could be listed.

use crate::config::GatewayConfig;
use crate::route::Proxy;

/// Lists, prints the pins file on stdout, and says what could not be listed on stderr.
pub(super) async fn print(config: GatewayConfig) -> Result<(), String> {
    if config.backends.is_empty() {
        return Err("no backend: the config file names no [[backend]]".to_owned());
    }
    let proxy = Proxy::with_principal_header(
        config.backends_with_defaults(),
        config.settings.catalog_ttl.into(),
        config.settings.backend_timeout.into(),
        config.principal_header(),
    );
    let (pins, problems) = proxy.pins_now().await;
    for problem in &problems {
        eprintln!("mrtr-gateway pin: not listed: {problem}");
    }
    if pins.pin.is_empty() && !problems.is_empty() {
        return Err("no backend could be listed".to_owned());
    }
    print!("{}", pins.to_toml()?);
    Ok(())
}
