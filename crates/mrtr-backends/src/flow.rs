//! A small stateless engine for multi-round MRTR flows.
//!
//! A flow is a sequence of rounds; each round asks the client for one or more
//! inputs (elicitation, sampling or roots). [`drive`] takes one incoming
//! request (its `inputResponses` and `requestState`), works out which round
//! the request belongs to, absorbs the answers for that round, and returns
//! either the next `InputRequiredResult` (with a freshly sealed
//! `requestState`) or the full set of answers once the last round is done.
//!
//! Rules implemented here, from SEP-2322 (spec digest §1.6):
//!
//! * keys in `inputResponses` that the current round did not ask for are
//!   ignored;
//! * a round whose answers are missing is asked again (only the missing keys)
//!   rather than failing;
//! * malformed answers (e.g. a number where an `ElicitResult` object belongs)
//!   are a `-32602` protocol error;
//! * a round is only emitted if this request's
//!   `_meta["io.modelcontextprotocol/clientCapabilities"]` declares what the
//!   round needs; otherwise the request fails with `-32021`
//!   MissingRequiredClientCapability naming the capability;
//! * answers collected in earlier rounds are carried inside the sealed state,
//!   never in server memory.

#![allow(deprecated)] // Sampling and roots are deprecated by SEP-2577 but still part of MRTR.

use std::collections::BTreeMap;

use rmcp::{
    ErrorData,
    model::{
        ClientCapabilities, CreateMessageRequest, CreateMessageRequestParams, ElicitRequest,
        ElicitRequestParams, ElicitationCapability, ElicitationSchema, InputRequest, InputRequests,
        InputRequiredResult, InputResponses, ListRootsRequest, RootsCapabilities, SamplingCapability,
        SamplingMessage,
    },
};
use serde_json::Value;

use crate::state::{FlowState, StateSealer};

/// Answers collected over all rounds, keyed by input-request key.
pub(crate) type Answers = BTreeMap<String, Value>;

/// One input the server asks the client for.
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub(crate) key: String,
    pub(crate) request: InputRequest,
}

impl Ask {
    /// A form-mode `elicitation/create` request.
    pub(crate) fn elicit(
        key: impl Into<String>,
        message: impl Into<String>,
        schema: ElicitationSchema,
    ) -> Self {
        Self {
            key: key.into(),
            request: InputRequest::Elicitation(ElicitRequest::new(
                ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message: message.into(),
                    requested_schema: schema,
                },
            )),
        }
    }

    /// A `sampling/createMessage` request with one user text message.
    pub(crate) fn sample(key: impl Into<String>, prompt: impl Into<String>, max_tokens: u32) -> Self {
        Self {
            key: key.into(),
            request: InputRequest::CreateMessage(CreateMessageRequest::new(CreateMessageRequestParams::new(
                vec![SamplingMessage::user_text(prompt)],
                max_tokens,
            ))),
        }
    }

    /// A `roots/list` request.
    pub(crate) fn roots(key: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            request: InputRequest::ListRoots(ListRootsRequest::default()),
        }
    }

    /// The capability this request needs, as a `ClientCapabilities` value
    /// suitable for `error.data.requiredCapabilities`.
    fn required_capability(&self) -> ClientCapabilities {
        let mut caps = ClientCapabilities::default();
        match &self.request {
            InputRequest::Elicitation(_) => {
                caps.elicitation = Some(ElicitationCapability::default());
            }
            InputRequest::CreateMessage(_) => caps.sampling = Some(SamplingCapability::default()),
            InputRequest::ListRoots(_) => caps.roots = Some(RootsCapabilities::default()),
            // `InputRequest` is non-exhaustive; an unknown kind cannot be
            // declared by any client, so report no specific capability.
            _ => {}
        }
        caps
    }

    /// Whether `caps` (the request's declared client capabilities) allow
    /// sending this input request.
    fn is_supported_by(&self, caps: &ClientCapabilities) -> bool {
        match &self.request {
            // `elicitation: {}` means form mode only; a client declaring
            // sub-modes must list `form` for form-mode requests.
            InputRequest::Elicitation(_) => caps
                .elicitation
                .as_ref()
                .is_some_and(|e| e.form.is_some() || e.url.is_none()),
            InputRequest::CreateMessage(_) => caps.sampling.is_some(),
            InputRequest::ListRoots(_) => caps.roots.is_some(),
            _ => false,
        }
    }

    /// Checks the shape of the client's answer to this request.
    fn validate_answer(&self, answer: &Value) -> Result<(), String> {
        let object = answer
            .as_object()
            .ok_or_else(|| format!("inputResponses[{:?}] must be an object", self.key))?;
        match &self.request {
            InputRequest::Elicitation(_) => {
                match object.get("action").and_then(Value::as_str) {
                    Some("accept" | "decline" | "cancel") => {}
                    _ => {
                        return Err(format!(
                            "inputResponses[{:?}] must be an ElicitResult with action accept, decline or cancel",
                            self.key
                        ));
                    }
                }
                match object.get("content") {
                    None | Some(Value::Object(_)) => Ok(()),
                    Some(_) => Err(format!(
                        "inputResponses[{:?}].content must be an object",
                        self.key
                    )),
                }
            }
            InputRequest::CreateMessage(_) => {
                if object.get("role").is_some_and(Value::is_string)
                    && object
                        .get("content")
                        .is_some_and(|c| c.is_object() || c.is_array())
                {
                    Ok(())
                } else {
                    Err(format!(
                        "inputResponses[{:?}] must be a CreateMessageResult with role and content",
                        self.key
                    ))
                }
            }
            InputRequest::ListRoots(_) => {
                if object.get("roots").is_some_and(Value::is_array) {
                    Ok(())
                } else {
                    Err(format!(
                        "inputResponses[{:?}] must be a ListRootsResult with a roots array",
                        self.key
                    ))
                }
            }
            _ => Ok(()),
        }
    }
}

/// What one call of [`drive`] produced.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Every round is answered; the flow may produce its final result.
    Complete(Answers),
    /// More input is needed; send this result to the client.
    InputRequired(InputRequiredResult),
}

/// The MRTR fields of one incoming request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retry<'a> {
    pub(crate) input_responses: Option<&'a InputResponses>,
    pub(crate) request_state: Option<&'a str>,
}

/// The `-32602` error for a request naming a `what` (tool, prompt) that the
/// backend does not have: `unknown {what} {name:?}`.
pub(crate) fn unknown(what: &str, name: &str) -> ErrorData {
    ErrorData::invalid_params(format!("unknown {what} {name:?}"), None)
}

/// Runs one step of a flow. See the module docs for the rules.
///
/// `plan(step, answers)` returns the input requests of round `step` given the
/// answers collected so far, or `None` once `step` is past the last round.
/// It must be deterministic for the same `(step, answers)`.
pub(crate) fn drive<F>(
    sealer: &StateSealer,
    binding: &[u8],
    retry: Retry<'_>,
    caps: &ClientCapabilities,
    plan: F,
) -> Result<Outcome, ErrorData>
where
    F: Fn(usize, &Answers) -> Result<Option<Vec<Ask>>, ErrorData>,
{
    let mut state = match retry.request_state {
        Some(sealed) => sealer.open(sealed, binding)?,
        None => FlowState::default(),
    };
    // Answers in this request belong to the round the state points at; they
    // are never credited to later rounds.
    let mut responses = retry.input_responses;
    loop {
        let Some(asks) = plan(state.step, &state.answers)? else {
            return Ok(Outcome::Complete(state.answers));
        };
        if let Some(unsupported) = asks.iter().find(|ask| !ask.is_supported_by(caps)) {
            return Err(ErrorData::missing_required_client_capability(
                unsupported.required_capability(),
            ));
        }
        if let Some(responses) = responses.take() {
            for ask in &asks {
                if state.answers.contains_key(&ask.key) {
                    continue;
                }
                if let Some(answer) = responses.get(&ask.key) {
                    ask.validate_answer(answer)
                        .map_err(|message| ErrorData::invalid_params(message, None))?;
                    state.answers.insert(ask.key.clone(), answer.clone());
                }
            }
        }
        let missing: InputRequests = asks
            .into_iter()
            .filter(|ask| !state.answers.contains_key(&ask.key))
            .map(|ask| (ask.key, ask.request))
            .collect();
        if missing.is_empty() {
            state.step += 1;
            continue;
        }
        let sealed = sealer.seal(&state, binding)?;
        return Ok(Outcome::InputRequired(InputRequiredResult::new(
            Some(missing),
            Some(sealed),
        )));
    }
}

/// Builds an elicitation schema, mapping the (static) builder error to an
/// internal error instead of panicking.
pub(crate) fn schema(
    build: impl FnOnce(rmcp::model::ElicitationSchemaBuilder) -> rmcp::model::ElicitationSchemaBuilder,
) -> Result<ElicitationSchema, ErrorData> {
    build(ElicitationSchema::builder())
        .build()
        .map_err(|error| ErrorData::internal_error(format!("invalid elicitation schema: {error}"), None))
}

/// Helpers to read collected answers.
pub(crate) mod answer {
    use serde_json::Value;

    /// The `action` of an `ElicitResult`, if any.
    pub(crate) fn action(answer: Option<&Value>) -> Option<&str> {
        answer?.get("action")?.as_str()
    }

    /// Whether an `ElicitResult` was accepted.
    pub(crate) fn accepted(answer: Option<&Value>) -> bool {
        action(answer) == Some("accept")
    }

    /// A field of an accepted `ElicitResult`'s content.
    pub(crate) fn field<'a>(answer: Option<&'a Value>, name: &str) -> Option<&'a Value> {
        answer?.get("content")?.get(name)
    }

    /// A string field of an accepted `ElicitResult`'s content.
    pub(crate) fn text_field<'a>(answer: Option<&'a Value>, name: &str) -> Option<&'a str> {
        field(answer, name)?.as_str()
    }

    /// The text of a `CreateMessageResult` (single block or first text block).
    pub(crate) fn sampled_text(answer: Option<&Value>) -> Option<&str> {
        let content = answer?.get("content")?;
        match content {
            Value::Array(blocks) => blocks
                .iter()
                .find_map(|block| block.get("text").and_then(Value::as_str)),
            block => block.get("text")?.as_str(),
        }
    }

    /// The root URIs of a `ListRootsResult`.
    pub(crate) fn root_uris(answer: Option<&Value>) -> Vec<&str> {
        answer
            .and_then(|a| a.get("roots"))
            .and_then(Value::as_array)
            .map(|roots| {
                roots
                    .iter()
                    .filter_map(|root| root.get("uri").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sealer() -> StateSealer {
        StateSealer::with_key("test", vec![1u8; 32]).expect("key")
    }

    fn all_caps() -> ClientCapabilities {
        let mut caps = ClientCapabilities::default();
        caps.elicitation = Some(ElicitationCapability::default());
        caps.sampling = Some(SamplingCapability::default());
        caps.roots = Some(RootsCapabilities::default());
        caps
    }

    fn two_rounds(step: usize, _: &Answers) -> Result<Option<Vec<Ask>>, ErrorData> {
        Ok(match step {
            0 => Some(vec![Ask::roots("a"), Ask::sample("b", "hi", 10)]),
            1 => Some(vec![Ask::roots("c")]),
            _ => None,
        })
    }

    fn responses(value: Value) -> InputResponses {
        serde_json::from_value(value).expect("map")
    }

    #[test]
    fn partial_answers_are_kept_and_missing_ones_reasked() {
        let sealer = sealer();
        let binding = b"b".to_vec();
        let first = responses(json!({"a": {"roots": []}, "zzz": 1}));
        let Outcome::InputRequired(r1) = drive(
            &sealer,
            &binding,
            Retry {
                input_responses: Some(&first),
                request_state: None,
            },
            &all_caps(),
            two_rounds,
        )
        .expect("round") else {
            panic!("expected input_required");
        };
        let keys: Vec<_> = r1
            .input_requests
            .as_ref()
            .expect("requests")
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["b"]);

        let second = responses(json!({"b": {"role": "assistant", "content": {"type": "text", "text": "x"}}}));
        let Outcome::InputRequired(r2) = drive(
            &sealer,
            &binding,
            Retry {
                input_responses: Some(&second),
                request_state: r1.request_state.as_deref(),
            },
            &all_caps(),
            two_rounds,
        )
        .expect("round") else {
            panic!("expected input_required");
        };
        let keys: Vec<_> = r2
            .input_requests
            .as_ref()
            .expect("requests")
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["c"]);
        assert_ne!(r1.request_state, r2.request_state);

        let third = responses(json!({"c": {"roots": [{"uri": "file:///x"}]}}));
        let Outcome::Complete(answers) = drive(
            &sealer,
            &binding,
            Retry {
                input_responses: Some(&third),
                request_state: r2.request_state.as_deref(),
            },
            &all_caps(),
            two_rounds,
        )
        .expect("round") else {
            panic!("expected complete");
        };
        assert_eq!(answers.len(), 3);
        assert_eq!(answer::root_uris(answers.get("c")), ["file:///x"]);
    }

    #[test]
    fn malformed_answers_and_missing_capabilities_are_errors() {
        let sealer = sealer();
        let bad = responses(json!({"a": 12345}));
        let error = drive(
            &sealer,
            b"b",
            Retry {
                input_responses: Some(&bad),
                request_state: None,
            },
            &all_caps(),
            two_rounds,
        )
        .expect_err("malformed");
        assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);

        let error = drive(
            &sealer,
            b"b",
            Retry {
                input_responses: None,
                request_state: None,
            },
            &ClientCapabilities::default(),
            two_rounds,
        )
        .expect_err("capability");
        assert_eq!(
            error.code,
            rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        );
        let data = error.data.expect("data");
        assert!(data["requiredCapabilities"]["roots"].is_object(), "{data}");
    }
}
