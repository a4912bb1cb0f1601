//! What an `initialize`-era backend's answer becomes for a 2026-07-28 client ([`Translation`]),
//! message by message, as the answer streams (`upstream/http/body.rs` applies it):
//!
//! * the response: its `id` back to the client's (the request went out under an id of the
//!   gateway's own, unique in the backend session, which several clients may share), and
//!   `resultType: "complete"` added to a result that has none (and to a list's or
//!   `resources/read`'s, `ttlMs: 0` and `cacheScope: "private"`);
//! * notifications (progress, log messages): passed on as they are;
//! * a request of the backend's (`elicitation/create`, `sampling/createMessage`, `roots/list`,
//!   `ping`): never passed on, since a 2026-07-28 client takes no server-to-client requests;
//!   answered into the backend's session instead, `ping` with an empty result and the others
//!   with an error that names the reason. Unless the request is a legacy client's, through the
//!   legacy front ([`ClientAsks`]): then the backend's request goes to that client, in-request,
//!   and its answer back into the session;
//! * an error response without an id: the answer to this request (one POST carries one);
//! * a response for another id: dropped.
//!
//! A translation dropped before its response came (the client went away) tells the backend with
//! `notifications/cancelled`, which is how the `initialize` era (and stdio, in every era) cancels.
//!
//! The same translation serves stdio backends (`upstream/stdio/`), where the gateway also
//! rewrites the request's `progressToken` (one process serves every client, whose tokens may
//! collide) and restores it here; a 2026-07-28 stdio backend's result is passed on as it is,
//! only its id restored. [`outgoing`] is the way there: a request under the gateway's id.

use std::fmt::Write as _;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use serde_json::value::RawValue;
use tower_mrtr::error::METHOD_NOT_FOUND;

use super::sse::{EventReader, write_message_event};
use crate::jsonrpc::{Members, RawObject, Splice, object_text};

/// Most requests of the backend's own answered during one call; later ones are dropped unanswered.
pub(crate) const MAX_ANSWERED: usize = 64;

/// Sends one JSON-RPC message into the backend session the request went out in (a POST of
/// the gateway's own, in the background).
pub(crate) type Reply = Arc<dyn Fn(Bytes) + Send + Sync>;

/// A client that takes a backend's own requests during its call: an `initialize`-era client,
/// whose request the legacy front (`legacy/bridge.rs`) sends on as a modern one with this in its
/// extensions. Its backend session declares `capabilities`; the backend's requests for the call
/// go to the front through `asks`, which relays each to the client's stream and sends back its
/// answer. Nothing outlives the call: the channel ends with it.
#[derive(Clone, Debug)]
pub(crate) struct ClientAsks {
    /// The capabilities the client declared at `initialize` (raw JSON).
    pub(crate) capabilities: Arc<str>,
    pub(crate) asks: tokio::sync::mpsc::Sender<Asked>,
}

/// One request of a backend's for the client: its method and params (raw JSON), and where the
/// client's answer goes (a result, or an error object).
#[derive(Debug)]
pub(crate) struct Asked {
    pub(crate) method: String,
    pub(crate) params: Box<RawValue>,
    pub(crate) answer: tokio::sync::oneshot::Sender<Result<Box<RawValue>, Box<RawValue>>>,
}

/// The backend requests a client can take (the others, `ping` among them, the gateway answers).
const CLIENT_REQUESTS: [&str; 3] = ["elicitation/create", "sampling/createMessage", "roots/list"];

/// The translation of one answer; see the [module docs](self).
pub(crate) struct Translation {
    /// The request's id in the backend session (raw JSON).
    ours: Box<str>,
    /// The client's id (raw JSON).
    theirs: Box<str>,
    reply: Reply,
    answered: bool,
    /// The backend's own requests answered so far (at most [`MAX_ANSWERED`]).
    replies: usize,
    /// Whether the result is one 2026-07-28 makes cacheable (lists, `resources/read`), which
    /// must carry `ttlMs` and `cacheScope`.
    cacheable: bool,
    /// Whether the backend speaks 2026-07-28 (a stdio one): its result needs nothing added.
    modern: bool,
    /// The client's `progressToken` (raw JSON), where the request went out with `ours` instead.
    progress: Option<Box<str>>,
    /// Whether the request is a `subscriptions/listen` (sent to a stdio backend under `ours`),
    /// whose notifications name it in `_meta`.
    listen: bool,
    /// Where the backend's own requests go, for a client that takes them.
    asks: Option<ClientAsks>,
    /// A JSON answer, read whole before it is translated.
    json: BytesMut,
    /// An SSE answer's events, read as they complete.
    events: EventReader,
}

impl std::fmt::Debug for Translation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Translation")
            .field("ours", &self.ours)
            .field("theirs", &self.theirs)
            .field("answered", &self.answered)
            .finish_non_exhaustive()
    }
}

impl Translation {
    /// The translation of the answer to the request the client sent as `theirs` and the gateway
    /// as `ours` (both raw JSON ids); `reply` answers the backend's own requests.
    pub(crate) fn new(ours: &str, theirs: &str, reply: Reply) -> Self {
        Self {
            ours: ours.into(),
            theirs: theirs.into(),
            reply,
            answered: false,
            replies: 0,
            cacheable: false,
            modern: false,
            progress: None,
            listen: false,
            asks: None,
            json: BytesMut::new(),
            events: EventReader::new(),
        }
    }

    /// For the answer to `method`: a cacheable result gets `ttlMs: 0` and `cacheScope:
    /// "private"` when it has none (an `initialize`-era server says nothing about caching, so
    /// nothing may be cached, and never shared across users).
    pub(crate) fn for_method(mut self, method: &str) -> Self {
        self.cacheable = matches!(
            method,
            "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" | "resources/read"
        );
        self.listen = method == "subscriptions/listen";
        self
    }

    /// For a 2026-07-28 backend's answer: only the id is restored (and the progress token).
    pub(crate) fn modern(mut self) -> Self {
        self.modern = true;
        self
    }

    /// Restores `token` (the client's `progressToken`, raw JSON) in progress notifications that
    /// carry the gateway's id instead ([`outgoing`] put it there).
    pub(crate) fn with_progress(mut self, token: Option<Box<str>>) -> Self {
        self.progress = token;
        self
    }

    /// Passes the backend's own requests to `asks` (a legacy client's call) instead of answering
    /// them with an error.
    pub(crate) fn with_asks(mut self, asks: Option<ClientAsks>) -> Self {
        self.asks = asks;
        self
    }

    /// One whole message as the client's SSE event; empty when nothing is for the client.
    pub(crate) fn event(&mut self, message: Bytes) -> Bytes {
        let mut out = BytesMut::new();
        self.write_event(message, &mut out);
        out.freeze()
    }

    /// A chunk of an SSE answer in, the client's events out: every event the chunk completes
    /// (an event may span chunks: one longer than the body's whole-event limit arrives in
    /// pieces), empty when nothing is for the client. A chunk of keep-alive comments alone
    /// passes as it is. `None` once an unfinished event holds more than `limit` bytes.
    pub(crate) fn events(&mut self, chunk: &[u8], limit: usize) -> Option<Bytes> {
        self.events.push(chunk);
        let mut out = BytesMut::new();
        let mut any = false;
        while let Some(data) = self.events.next_event() {
            any = true;
            self.write_event(data, &mut out);
        }
        if self.events.held() > limit {
            return None;
        }
        if !any && self.events.held() == 0 && chunk.starts_with(b":") {
            // Keep-alive comments keep the client's stream open while a tool works.
            return Some(Bytes::copy_from_slice(chunk));
        }
        // Events without data (the priming event a legacy server sends for resumption, its
        // `id` and `retry`) mean nothing to a 2026-07-28 client: dropped.
        Some(out.freeze())
    }

    /// The end of an SSE answer: an event the stream ended inside, translated.
    pub(crate) fn finish_events(&mut self) -> Bytes {
        let mut out = BytesMut::new();
        if let Some(data) = self.events.finish() {
            self.write_event(data, &mut out);
        }
        out.freeze()
    }

    /// Writes what the client gets of the event `data` to `out`, as one event.
    fn write_event(&mut self, data: Bytes, out: &mut BytesMut) {
        if let Some(message) = self.message(data) {
            write_message_event(&message, out);
        }
    }

    /// A chunk of a JSON answer; `false` once the answer outgrew `limit` bytes.
    pub(crate) fn push_json(&mut self, chunk: &[u8], limit: usize) -> bool {
        self.json.extend_from_slice(chunk);
        self.json.len() <= limit
    }

    /// The whole JSON answer, translated.
    pub(crate) fn finish_json(&mut self) -> Bytes {
        let body = self.json.split().freeze();
        self.one(body)
    }

    /// One whole JSON message (an answer read already), translated; as it came when it is
    /// nothing for the client.
    pub(crate) fn one(&mut self, message: Bytes) -> Bytes {
        self.message(message.clone()).unwrap_or(message)
    }

    /// One message: what the client gets of it, if anything (passed on uncopied when it
    /// needs no change).
    fn message(&mut self, data: Bytes) -> Option<Bytes> {
        let text = data.clone();
        let Some(message) = Members::parse(&text) else {
            // Not a JSON object: the MRTR layer above refuses what it cannot read.
            return Some(data);
        };
        let id = message.get("id").filter(|id| *id != "null");
        match (message.get("method"), id) {
            (Some(method), Some(id)) => {
                // Each answer is a POST of the gateway's own: a backend that keeps asking gets
                // no more than a bounded number of them per call.
                if self.replies < MAX_ANSWERED {
                    self.replies += 1;
                    let method: String = serde_json::from_str(method).unwrap_or_default();
                    let params = message.get("params").unwrap_or("{}");
                    if !self.ask_client(id, &method, params) {
                        (self.reply)(answer_backend_request(id, &method));
                    }
                }
                None
            }
            (Some(method), None) => match &self.progress {
                Some(token) if method == r#""notifications/progress""# => {
                    Some(self.progress_notification(&data, token).unwrap_or(data))
                }
                _ if self.listen => Some(self.listen_notification(&data).unwrap_or(data)),
                _ => Some(data),
            },
            (None, Some(id)) if id == &*self.ours => {
                self.answered = true;
                Some(self.response(&message, &text))
            }
            // An error without an id (the backend could not read the request, or lost its
            // session) is about the one request this POST carried.
            (None, None) if message.get("error").is_some() => {
                self.answered = true;
                Some(self.response(&message, &text))
            }
            (None, _) => None,
        }
    }

    /// Hands the backend's request `id` to the client of [`ClientAsks`], answering the backend
    /// with what the client answers, in the background; `false` when there is no such client or
    /// it does not take `method`.
    fn ask_client(&self, id: &str, method: &str, params: &str) -> bool {
        let Some(asks) = &self.asks else { return false };
        if !CLIENT_REQUESTS.contains(&method) {
            return false;
        }
        let (Ok(params), Ok(runtime)) = (
            RawValue::from_string(params.to_owned()),
            tokio::runtime::Handle::try_current(),
        ) else {
            return false;
        };
        let (answer, answered) = tokio::sync::oneshot::channel();
        let asked = Asked {
            method: method.to_owned(),
            params,
            answer,
        };
        if asks.asks.try_send(asked).is_err() {
            return false;
        }
        let (id, reply) = (id.to_owned(), self.reply.clone());
        runtime.spawn(async move {
            let message = match answered.await {
                Ok(Ok(result)) => format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{}}}"#, result.get()),
                Ok(Err(error)) => format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{}}}"#, error.get()),
                // The call ended first: the backend's request goes unanswered, as its request
                // is cancelled with it.
                Err(_) => return,
            };
            reply(Bytes::from(message));
        });
        true
    }

    /// A progress notification with the client's `token` back in place of the gateway's.
    fn progress_notification(&self, data: &[u8], token: &str) -> Option<Bytes> {
        let mut message: RawObject = serde_json::from_slice(data).ok()?;
        let (_, params) = message.0.iter_mut().find(|(key, _)| key == "params")?;
        let mut object: RawObject = serde_json::from_str(params.get()).ok()?;
        let (_, value) = object.0.iter_mut().find(|(key, _)| key == "progressToken")?;
        if value.get() != &*self.ours {
            return None;
        }
        *value = RawValue::from_string(token.to_owned()).ok()?;
        *params = serde_json::value::to_raw_value(&object).ok()?;
        serde_json::to_vec(&message).ok().map(Bytes::from)
    }

    /// A listen stream's notification with the client's request id back in
    /// `_meta["io.modelcontextprotocol/subscriptionId"]`, where it names the gateway's.
    fn listen_notification(&self, data: &[u8]) -> Option<Bytes> {
        let mut message: RawObject = serde_json::from_slice(data).ok()?;
        let (_, params) = message.0.iter_mut().find(|(key, _)| key == "params")?;
        let mut object: RawObject = serde_json::from_str(params.get()).ok()?;
        let (_, meta) = object.0.iter_mut().find(|(key, _)| key == "_meta")?;
        let mut fields: RawObject = serde_json::from_str(meta.get()).ok()?;
        let (_, value) = fields
            .0
            .iter_mut()
            .find(|(key, _)| key == "io.modelcontextprotocol/subscriptionId")?;
        if value.get() != &*self.ours {
            return None;
        }
        *value = RawValue::from_string(self.theirs.to_string()).ok()?;
        *meta = serde_json::value::to_raw_value(&fields).ok()?;
        *params = serde_json::value::to_raw_value(&object).ok()?;
        serde_json::to_vec(&message).ok().map(Bytes::from)
    }

    /// The backend's response (`message`, read from `text`) under the client's id, with
    /// `resultType` on a result: the id's text and the members added are the only bytes that
    /// change.
    fn response(&self, message: &Members<'_>, text: &[u8]) -> Bytes {
        self.rewrite_response(message, text)
            .map(Bytes::from)
            .unwrap_or_default()
    }

    fn rewrite_response(&self, message: &Members<'_>, text: &[u8]) -> Option<Vec<u8>> {
        let mut splice = Splice::new(text);
        match message.get("id") {
            Some(id) => splice.replace(id, self.theirs.as_bytes())?,
            None => {
                // The last `}` of the text closes the message, which has an `error` member.
                let end = text.iter().rposition(|&b| b == b'}')?;
                splice.insert(end, format!(r#","id":{}"#, self.theirs).into_bytes());
            }
        }
        if !self.modern
            && let Some(result) = message.get("result")
            && let Some(missing) = missing_members(result, self.cacheable)
        {
            splice.insert_before_end(result, missing.into_bytes())?;
        }
        splice.finish()
    }
}

impl Drop for Translation {
    fn drop(&mut self) {
        if !self.answered {
            let cancelled = format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{},"reason":"the client went away"}}}}"#,
                self.ours
            );
            (self.reply)(Bytes::from(cancelled));
        }
    }
}

/// A client's request on its way to a backend under the gateway's id.
#[derive(Debug)]
pub(crate) struct Outgoing {
    /// The request as sent.
    pub(crate) body: Bytes,
    /// The client's id (raw JSON), when it had one.
    pub(crate) id: Option<Box<str>>,
    /// The client's `params._meta.progressToken` (raw JSON), when it was replaced.
    pub(crate) progress: Option<Box<str>>,
}

/// `body` under the id `ours` (raw JSON). For a `legacy` backend, no `io.modelcontextprotocol/*`
/// member stays in `params._meta` (an emptied `_meta` goes). With `progress`, a
/// `params._meta.progressToken` becomes `ours` too, so that progress from a backend several
/// clients share is told apart. Every other byte stays as it came (the id's text and the `_meta`
/// rewritten are spliced in). `None`: not a JSON-RPC object with object `params`.
pub(crate) fn outgoing(body: &[u8], ours: &str, legacy: bool, progress: bool) -> Option<Outgoing> {
    let message = Members::parse(body)?;
    let mut out = Outgoing {
        body: Bytes::new(),
        id: None,
        progress: None,
    };
    let mut splice = Splice::new(body);
    for (key, value) in &message.0 {
        if key == "id" {
            out.id = Some((*value).into());
            splice.replace(value, ours.as_bytes().to_vec())?;
        } else if key == "params" {
            let params = Members::of(value)?;
            if let Some(text) = outgoing_params(&params, value, ours, legacy, progress, &mut out.progress)? {
                splice.replace(value, text.into_bytes())?;
            }
        }
    }
    out.body = Bytes::from(splice.finish()?);
    Some(out)
}

/// `params` (read from `text`) as [`outgoing`] sends them, `Some(None)` when they go as they
/// are; the client's progress token goes to `token`. `None`: a `_meta` that is no object.
fn outgoing_params(
    params: &Members<'_>,
    text: &str,
    ours: &str,
    legacy: bool,
    progress: bool,
    token: &mut Option<Box<str>>,
) -> Option<Option<String>> {
    let Some(index) = params.0.iter().position(|(k, _)| k == "_meta") else {
        return Some(None);
    };
    let meta = params.0[index].1;
    let fields = Members::of(meta)?;
    let mut kept: Vec<(&str, &str)> = Vec::with_capacity(fields.0.len());
    let mut changed = false;
    for (key, value) in &fields.0 {
        if legacy && key.starts_with("io.modelcontextprotocol/") {
            changed = true;
        } else if progress && key == "progressToken" {
            *token = Some((*value).into());
            kept.push((key, ours));
            changed = true;
        } else {
            kept.push((key, value));
        }
    }
    if kept.is_empty() {
        // An emptied (or empty) `_meta` goes.
        let others = params.0.iter().enumerate().filter(|(i, _)| *i != index);
        return Some(Some(object_text(others.map(|(_, (k, v))| (k.as_ref(), *v)))));
    }
    if !changed {
        return Some(None);
    }
    let mut splice = Splice::new(text.as_bytes());
    splice.replace(meta, object_text(kept).into_bytes())?;
    String::from_utf8(splice.finish()?).ok().map(Some)
}

/// What 2026-07-28 requires of a `result` and it lacks, as members to add before its closing
/// `}`: `"resultType":"complete"`, and for a `cacheable` one `"ttlMs":0` and
/// `"cacheScope":"private"`. `None`: nothing to add, or no object.
fn missing_members(result: &str, cacheable: bool) -> Option<String> {
    let object = Members::of(result)?;
    let mut missing = vec![("resultType", r#""complete""#)];
    if cacheable {
        missing.extend([("ttlMs", "0"), ("cacheScope", r#""private""#)]);
    }
    missing.retain(|(key, _)| object.get(key).is_none());
    if missing.is_empty() {
        return None;
    }
    let mut text = String::new();
    for (key, value) in missing {
        if !text.is_empty() || !object.0.is_empty() {
            text.push(',');
        }
        text.push('"');
        text.push_str(key);
        text.push_str(r#"":"#);
        text.push_str(value);
    }
    Some(text)
}

/// The gateway's answer to a request a backend sent on a 2026-07-28 client's behalf.
pub(crate) fn answer_backend_request(id: &str, method: &str) -> Bytes {
    let mut text = String::new();
    if method == "ping" {
        let _ = write!(text, r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
    } else {
        let message = format!(
            "mrtr-gateway relays this request for a 2026-07-28 client, which takes no {method} in-request: a client that declares the Tasks extension (io.modelcontextprotocol/tasks) and the capability in clientCapabilities gets the call as a task, and a legacy client gets the request in-request (see docs/gateway.md, legacy backends)"
        );
        let message = serde_json::to_string(&message).unwrap_or_default();
        let _ = write!(
            text,
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{METHOD_NOT_FOUND},"message":{message}}}}}"#
        );
    }
    Bytes::from(text)
}

#[cfg(test)]
mod splices;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use std::sync::Mutex;

    const LIMIT: usize = 1024;

    #[test]
    fn requests_lose_the_modern_meta_and_get_the_gateways_id() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"n":1.50},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":"p"}}}"#;
        let legacy = outgoing(body, r#""mrtr-3""#, true, false).unwrap();
        assert_eq!(
            std::str::from_utf8(&legacy.body).unwrap(),
            r#"{"jsonrpc":"2.0","id":"mrtr-3","method":"tools/call","params":{"name":"echo","arguments":{"n":1.50},"_meta":{"progressToken":"p"}}}"#
        );
        assert_eq!((legacy.id.as_deref(), legacy.progress), (Some("7"), None));
        let only_modern = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let legacy = outgoing(only_modern, "1", true, false).unwrap();
        assert_eq!(
            std::str::from_utf8(&legacy.body).unwrap(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#
        );
        // Over stdio, in 2026-07-28: the meta stays, the progress token becomes the gateway's.
        let stdio = outgoing(body, r#""mrtr-4""#, false, true).unwrap();
        assert_eq!(
            std::str::from_utf8(&stdio.body).unwrap(),
            r#"{"jsonrpc":"2.0","id":"mrtr-4","method":"tools/call","params":{"name":"echo","arguments":{"n":1.50},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":"mrtr-4"}}}"#
        );
        assert_eq!(stdio.progress.as_deref(), Some(r#""p""#));
        assert!(outgoing(b"[1]", "1", true, true).is_none());
    }

    #[test]
    fn progress_gets_the_clients_token_back_and_modern_results_stay_as_they_are() {
        let (t, _) = translation();
        let mut t = t.modern().with_progress(Some(r#"{"k":1}"#.into()));
        let progress = t.event(Bytes::from_static(
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"mrtr-7","progress":1}}"#,
        ));
        assert_eq!(data(&progress)[0]["params"]["progressToken"], json!({ "k": 1 }));
        let other = t.event(Bytes::from_static(
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"mrtr-8","progress":1}}"#,
        ));
        assert_eq!(
            data(&other)[0]["params"]["progressToken"],
            "mrtr-8",
            "not ours: as it came"
        );
        assert!(!t.answered);
        let out = t.one(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":"mrtr-7","result":{"content":[]}}"#,
        ));
        assert_eq!(&out[..], br#"{"jsonrpc":"2.0","id":42,"result":{"content":[]}}"#);
        assert!(t.answered);
    }

    #[test]
    fn a_listens_notifications_name_the_clients_request_again() {
        let (t, _) = translation();
        let mut t = t.modern().for_method("subscriptions/listen");
        let ack = t.event(Bytes::from_static(
            br#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"notifications":{"toolsListChanged":true},"_meta":{"io.modelcontextprotocol/subscriptionId":"mrtr-7"}}}"#,
        ));
        let ack = &data(&ack)[0]["params"];
        assert_eq!(ack["_meta"]["io.modelcontextprotocol/subscriptionId"], 42);
        assert_eq!(ack["notifications"], json!({ "toolsListChanged": true }));
        let other = t.event(Bytes::from_static(
            br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"mrtr-8"}}}"#,
        ));
        assert_eq!(
            data(&other)[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            "mrtr-8",
            "not ours: as it came"
        );
    }

    #[test]
    fn an_event_in_pieces_is_translated_once_whole_and_a_huge_one_refused() {
        let (mut t, _) = translation();
        let event = b"data: {\"jsonrpc\":\"2.0\",\"id\":\"mrtr-7\",\"result\":{\"text\":\"abcdef\"}}\n\n";
        let (first, rest) = event.split_at(20);
        assert!(
            t.events(first, LIMIT).unwrap().is_empty(),
            "nothing before the event is whole"
        );
        let out = t.events(rest, LIMIT).unwrap();
        assert_eq!(data(&out)[0]["id"], 42, "{out:?}");
        let (mut t, _) = translation();
        assert!(
            t.events(&[b'x'; 2048], LIMIT).is_none(),
            "an unfinished event over the limit"
        );
        let (mut t, _) = translation();
        assert!(
            t.events(
                b"data: {\"jsonrpc\":\"2.0\",\"id\":\"mrtr-7\",\"result\":{}}",
                LIMIT
            )
            .unwrap()
            .is_empty()
        );
        assert_eq!(
            data(&t.finish_events())[0]["id"],
            42,
            "the stream ended inside the event"
        );
    }

    fn translation() -> (Translation, Arc<Mutex<Vec<Value>>>) {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let log = sent.clone();
        let reply: Reply = Arc::new(move |message: Bytes| {
            log.lock()
                .unwrap()
                .push(serde_json::from_slice(&message).unwrap());
        });
        (Translation::new(r#""mrtr-7""#, "42", reply), sent)
    }

    fn data(events: &Bytes) -> Vec<Value> {
        let mut reader = EventReader::new();
        reader.push(events);
        std::iter::from_fn(|| reader.next_event())
            .map(|d| serde_json::from_slice(&d).unwrap())
            .collect()
    }

    #[test]
    fn the_response_gets_the_clients_id_and_a_result_type() {
        let (mut t, sent) = translation();
        let out = t
            .events(
                b"id: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":3,\"progress\":1}}\n\n\
                  event: message\ndata: {\"result\":{\"content\":[],\"n\":1.50},\"jsonrpc\":\"2.0\",\"id\":\"mrtr-7\"}\n\n",
                LIMIT,
            )
            .unwrap();
        let messages = data(&out);
        assert_eq!(messages[0]["method"], "notifications/progress");
        assert_eq!(messages[1]["id"], 42);
        assert_eq!(messages[1]["result"]["resultType"], "complete");
        assert!(String::from_utf8_lossy(&out).contains("1.50"), "raw numbers kept");
        drop(t);
        assert!(sent.lock().unwrap().is_empty(), "answered: nothing to cancel");
    }

    #[test]
    fn the_backends_requests_are_answered_into_its_session_never_passed_on() {
        let (mut t, sent) = translation();
        let out = t
            .events(
                b"data: {\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"elicitation/create\",\"params\":{}}\n\n\
                  data: {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n\n",
                LIMIT,
            )
            .unwrap();
        assert!(out.is_empty(), "{out:?}");
        let sent = sent.lock().unwrap().clone();
        assert_eq!(sent[0]["id"], 0);
        assert_eq!(sent[0]["error"]["code"], -32601);
        assert!(
            sent[0]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("elicitation/create")
        );
        assert_eq!(sent[1], json!({ "jsonrpc": "2.0", "id": 1, "result": {} }));
        drop(sent);
        let flood = "data: {\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"roots/list\"}\n\n".repeat(100);
        t.events(flood.as_bytes(), LIMIT).unwrap();
        assert_eq!(
            t.replies, MAX_ANSWERED,
            "a flood of requests gets a bounded number of answers"
        );
    }

    #[test]
    fn a_translation_dropped_unanswered_cancels_the_request() {
        let (t, sent) = translation();
        drop(t);
        let sent = sent.lock().unwrap().clone();
        assert_eq!(sent[0]["method"], "notifications/cancelled");
        assert_eq!(sent[0]["params"]["requestId"], "mrtr-7");
    }

    #[test]
    fn json_answers_are_translated_whole_and_other_ids_dropped() {
        let (t, _) = translation();
        let mut t = t.for_method("tools/list");
        assert!(t.push_json(br#"{"jsonrpc":"2.0","id":"mrtr-7","#, 1024));
        assert!(t.push_json(br#""result":{"resultType":"complete","tools":[]}}"#, 1024));
        let out: Value = serde_json::from_slice(&t.finish_json()).unwrap();
        assert_eq!(out["id"], 42);
        assert_eq!(
            out["result"],
            json!({ "resultType": "complete", "tools": [], "ttlMs": 0, "cacheScope": "private" })
        );
        let other = t
            .events(
                b"data: {\"jsonrpc\":\"2.0\",\"id\":\"mrtr-8\",\"result\":{}}\n\n",
                LIMIT,
            )
            .unwrap();
        assert!(other.is_empty());
        let lost = t.events(b"data: {\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32001,\"message\":\"Session not found\"},\"id\":null}\n\n", LIMIT).unwrap();
        assert_eq!(data(&lost)[0]["id"], 42, "an id-less error is this request's");
        assert!(!t.push_json(&[b' '; 2048], 1024));
        let keepalive = t.events(b": keep-alive\n\n", LIMIT).unwrap();
        assert_eq!(&keepalive[..], b": keep-alive\n\n");
        assert!(
            t.events(b"data: \nid: 0/1\nretry: 3000\n\n", LIMIT)
                .unwrap()
                .is_empty(),
            "a priming event"
        );
    }
}
