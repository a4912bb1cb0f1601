//! Routing to the one backend a request names: an MRTR retry or task follow-up to the backend
//! its envelope pins ([`pinned`](Inner::pinned), the name restored to that backend's own), a
//! `tools/call` or `prompts/get` by its exposed name, a `resources/read` by its URI's owner, a
//! `completion/complete` by the prompt or resource it completes. Each asks the catalog, which
//! lists the backends again when it does not know the name yet ([`catalog`](Inner::catalog)).

use bytes::Bytes;
use http::StatusCode;
use http::request::Parts;
use serde::Deserialize;
use tower_mrtr::{McpRequestHead, Route};

use super::catalog::{Kind, SEPARATOR};
use super::{INVALID_PARAMS, Inner, Routed, URIS, error_response, govern, invalid_params};

impl Inner {
    /// An MRTR retry: it must reach the backend that minted the state.
    pub(super) async fn pinned(
        &self,
        parts: Parts,
        head: &McpRequestHead,
        route: &Route,
        body: Bytes,
    ) -> Routed {
        let Some(index) = self.backends.iter().position(|b| b.route() == route) else {
            tracing::info!(backend = %route, "retry pinned to a backend that is no longer configured");
            let message = format!(
                "The backend {:?} that started this request is no longer configured; start the request again without requestState",
                route.as_str()
            );
            return (route.clone(), invalid_params(head.id_json(), &message));
        };
        if let Err(denied) = self.permit_follow_up(&parts, head, index, &body).await {
            return (route.clone(), govern::refusal(head.id_json(), &denied));
        }
        let kind = match head.method() {
            "tools/call" => Some(Kind::Tools),
            "prompts/get" => Some(Kind::Prompts),
            _ => None,
        };
        // With one backend nothing is exposed prefixed, so a name without this backend's prefix
        // is its own; one with it may have been exposed so by a replica with more backends.
        let prefix = |name: &str| {
            name.strip_prefix(self.backends[index].name())
                .is_some_and(|rest| rest.starts_with(SEPARATOR))
        };
        let exposed = head
            .target()
            .filter(|name| self.backends.len() > 1 || prefix(name));
        let (Some(kind), Some(exposed)) = (kind, exposed) else {
            return self
                .forward(
                    index,
                    (parts.headers, parts.extensions),
                    head.id_json(),
                    body,
                    None,
                )
                .await;
        };
        // The envelope pins the backend; the name is the one the client used in the first round,
        // which may have gained or lost its `<backend>__` prefix since (a backend added or
        // removed in between). Only the pinned backend's own listing says which of its names it
        // is: a replica that has not listed it lists it first, and a name still unknown there is
        // refused, never guessed.
        let original = self
            .catalog(&[kind], false, &parts, &body, |proxy| {
                proxy.pinned_name(kind, index, exposed)
            })
            .await;
        let Some(original) = original else {
            let what = if kind == Kind::Tools { "tool" } else { "prompt" };
            let message = format!(
                "Unknown {what} {exposed:?} on the backend {:?} that started this request; start the request again without requestState",
                route.as_str()
            );
            return (route.clone(), invalid_params(head.id_json(), &message));
        };
        if let Err(denied) = self.permit_named(&parts, head, exposed, (index, &original)) {
            return (route.clone(), govern::refusal(head.id_json(), &denied));
        }
        let asked = (exposed, head.id_json());
        if let Some(refusal) = self
            .withheld(kind, (index, &original), asked, &parts, &body)
            .await
        {
            return (route.clone(), refusal);
        }
        let rename = (original != exposed).then_some((&["params", "name"][..], original.as_str()));
        self.forward(
            index,
            (parts.headers, parts.extensions),
            head.id_json(),
            body,
            rename,
        )
        .await
    }

    /// The name backend `index` gives the tool or prompt a pinned retry calls `exposed`: what
    /// the catalog exposes under that name today if it is this backend's, else the backend's
    /// own name `exposed` (exposed unprefixed in the first round), else `<backend>__<name>`'s
    /// `name` (exposed prefixed then); each only if the backend listed it.
    pub(super) fn pinned_name(&self, kind: Kind, index: usize, exposed: &str) -> Option<String> {
        if let Some((backend, original)) = self.catalog.resolve_name(kind, exposed)
            && backend == index
        {
            return Some(original);
        }
        if self.catalog.offers(kind, index, exposed) {
            return Some(exposed.to_owned());
        }
        let own = exposed
            .strip_prefix(self.backends[index].name())
            .and_then(|rest| rest.strip_prefix(SEPARATOR))?;
        self.catalog.offers(kind, index, own).then(|| own.to_owned())
    }

    /// `tools/call` or `prompts/get` with several backends.
    pub(super) async fn named(&self, kind: Kind, parts: Parts, head: &McpRequestHead, body: Bytes) -> Routed {
        let id = head.id_json();
        let Some(exposed) = head.target() else {
            return self.own(invalid_params(id, "Missing params.name"));
        };
        let resolved = self
            .catalog(&[kind], true, &parts, &body, |proxy| {
                proxy.catalog.resolve_name(kind, exposed)
            })
            .await;
        let Some((index, original)) = resolved else {
            let what = if kind == Kind::Tools { "tool" } else { "prompt" };
            return self.own(invalid_params(id, &format!("Unknown {what}: {exposed}")));
        };
        if let Err(denied) = self.permit_named(&parts, head, exposed, (index, &original)) {
            return self.own(govern::refusal(id, &denied));
        }
        if let Some(refusal) = self
            .withheld(kind, (index, &original), (exposed, id), &parts, &body)
            .await
        {
            return self.own(refusal);
        }
        let rename = (original != exposed).then_some((&["params", "name"][..], original.as_str()));
        self.forward(index, (parts.headers, parts.extensions), id, body, rename)
            .await
    }

    /// `resources/read` with several backends: by the URI's owner.
    pub(super) async fn resource(&self, parts: Parts, head: &McpRequestHead, body: Bytes) -> Routed {
        let id = head.id_json();
        let Some(uri) = head.target() else {
            return self.own(invalid_params(id, "Missing params.uri"));
        };
        let owner = self
            .catalog(&URIS, true, &parts, &body, |proxy| proxy.catalog.resolve_uri(uri))
            .await;
        match owner {
            Some(index) => {
                self.forward(index, (parts.headers, parts.extensions), id, body, None)
                    .await
            }
            None => self.own(error_response(
                StatusCode::OK,
                id,
                INVALID_PARAMS,
                "Resource not found",
                Some(serde_json::json!({ "uri": uri })),
            )),
        }
    }

    /// `completion/complete` with several backends: by the prompt or resource it completes for.
    pub(super) async fn completion(&self, parts: Parts, head: &McpRequestHead, body: Bytes) -> Routed {
        #[derive(Deserialize)]
        struct Message {
            params: Params,
        }
        #[derive(Deserialize)]
        struct Params {
            #[serde(rename = "ref")]
            reference: Reference,
        }
        #[derive(Deserialize)]
        struct Reference {
            #[serde(rename = "type")]
            kind: String,
            name: Option<String>,
            uri: Option<String>,
        }
        let id = head.id_json();
        let Ok(message) = serde_json::from_slice::<Message>(&body) else {
            return self.own(invalid_params(id, "Invalid params.ref"));
        };
        let reference = message.params.reference;
        match (reference.kind.as_str(), reference.name, reference.uri) {
            ("ref/prompt", Some(exposed), _) => {
                let resolved = self
                    .catalog(&[Kind::Prompts], true, &parts, &body, |proxy| {
                        proxy.catalog.resolve_name(Kind::Prompts, &exposed)
                    })
                    .await;
                match resolved {
                    Some((index, original)) => {
                        let rename = (original != exposed)
                            .then_some((&["params", "ref", "name"][..], original.as_str()));
                        self.forward(index, (parts.headers, parts.extensions), id, body, rename)
                            .await
                    }
                    None => self.own(invalid_params(id, &format!("Unknown prompt: {exposed}"))),
                }
            }
            ("ref/resource", _, Some(uri)) => {
                let owner = self
                    .catalog(&URIS, false, &parts, &body, |proxy| {
                        proxy.catalog.resolve_uri(&uri)
                    })
                    .await;
                match owner {
                    Some(index) => {
                        self.forward(index, (parts.headers, parts.extensions), id, body, None)
                            .await
                    }
                    None => self.own(invalid_params(id, "Resource not found")),
                }
            }
            _ => self.own(invalid_params(id, "Invalid params.ref")),
        }
    }
}
