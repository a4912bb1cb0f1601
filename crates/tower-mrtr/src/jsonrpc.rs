//! Reading JSON-RPC messages: only the members the layer needs, strictly.
//!
//! The layer and the backend must read a request the same way, or a client could show the layer
//! one thing and the backend another. So every object the layer reads (the message, its `params`,
//! a subscription filter, a result) is refused when it is ambiguous:
//!
//! * a member name that appears twice (parsers disagree on which one wins);
//! * a member name that differs from one the layer reads only in case, such as `RequestState`,
//!   `REQUESTSTATE` or `requeſtState` (U+017F): Go's `encoding/json` (v1) matches all of them to
//!   `requestState`, and the MCP Go SDK had to fix exactly that. The folding refused is ASCII
//!   case plus the two non-ASCII letters that fold to ASCII ones, `ſ` (to `s`) and the Kelvin sign
//!   `K` (to `k`).
//!
//! Reading never re-serialises anything: values stay [`RawValue`]s borrowed from the body.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::HashSet;
use std::fmt;
use std::sync::LazyLock;

use bytes::Bytes;
use memchr::memmem::Finder;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::json::{self, Members, Name, Position, Raw};

pub(crate) mod scan;

/// Methods whose results may be `input_required` (SEP-2322: the list is closed).
pub(crate) const INPUT_REQUIRED_METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

/// Whether `method` may answer `input_required`.
pub(crate) fn may_require_input(method: &str) -> bool {
    INPUT_REQUIRED_METHODS.contains(&method)
}

/// Whether `method`'s `params.arguments` is bound into its envelopes (tools and prompts take
/// arguments; a resource is named by its URI alone).
pub(crate) fn takes_arguments(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get")
}

/// Task follow-up methods of the Tasks extension: `params.taskId` is a task handle.
pub(crate) const TASK_METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];

/// The method whose `params.notifications.taskIds` may hold task handles.
pub(crate) const LISTEN_METHOD: &str = "subscriptions/listen";

/// Member names the layer reads in a request, its `params` or a subscription filter. A member
/// named like one of these but for case is refused (see the module docs).
pub(crate) const REQUEST_MEMBERS: &[&str] = &[
    "method",
    "params",
    "name",
    "uri",
    "arguments",
    "requestState",
    "inputResponses",
    "taskId",
    "taskIds",
    "notifications",
    "_meta",
];

/// Member names the layer reads in a response or its result.
pub(crate) const RESULT_MEMBERS: &[&str] = &[
    "result",
    "resultType",
    "requestState",
    "inputRequests",
    "taskId",
    "taskIds",
    "ttlMs",
];

/// Byte strings that make an answer to `tools/call`, `prompts/get` or `resources/read` worth
/// parsing: the two result types the layer acts on, `input_required` and `"task"` (quoted: a
/// value, which no client folds, unlike a member name: a task id under `TaskId` is read as
/// `taskId` by Go's `encoding/json`, so the name cannot be the needle; the parse then refuses such
/// a name). `\u` is there because any key or value may be written with escapes
/// (`"input\u005frequired"` means `input_required` to every client), so a message using escapes
/// is parsed rather than trusted to the plain-text filter.
pub(crate) const RESPONSE_NEEDLES: [&[u8]; 3] = [b"input_required", b"\"task\"", b"\\u"];

/// Byte strings without which an answer to a task follow-up holds no task id to map: ids sit in
/// `taskId` members and `taskIds` arrays (the first needle finds both), and a message with a
/// backslash may spell those names with escapes. The needles do not depend on the ids, so the
/// search costs the same for one id as for a hundred.
pub(crate) const TASK_NEEDLES: [&[u8]; 2] = [b"taskId", b"\\"];

/// Searchers for [`RESPONSE_NEEDLES`], built once: building one costs more than a search of a
/// typical message.
static RESPONSE_FINDERS: LazyLock<Vec<Finder<'static>>> = LazyLock::new(|| {
    RESPONSE_NEEDLES
        .iter()
        .map(|n| Finder::new(n).into_owned())
        .collect()
});

/// Whether a response body may hold something the layer must seal.
pub(crate) fn response_is_candidate(body: &[u8]) -> bool {
    RESPONSE_FINDERS.iter().any(|f| f.find(body).is_some())
}

/// Whether an answer to a task follow-up may hold a task id.
pub(crate) fn may_hold_task_ids(body: &[u8]) -> bool {
    static FINDER: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(TASK_NEEDLES[0]));
    memchr::memchr(b'\\', body).is_some() || FINDER.find(body).is_some()
}

/// Why an object could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// Not JSON at all (syntax, encoding, trailing bytes).
    NotJson,
    /// JSON, but not an object where one is required.
    NotAnObject,
    /// The member named so appears twice.
    Duplicate(String),
    /// The member named so differs from one the layer reads only in case.
    CaseVariant(String),
    /// The member named so does not have the type the layer requires (e.g. a `method` that is
    /// not a string).
    WrongType(&'static str),
}

impl ReadError {
    /// A short description for logs and for the client's error message (it names only what the
    /// client itself sent).
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::NotJson => "not valid JSON".to_owned(),
            Self::NotAnObject => "not a JSON object".to_owned(),
            Self::Duplicate(name) => format!("member {} appears more than once", quoted(name)),
            Self::CaseVariant(name) => format!(
                "member {} differs from a member the relay reads only in letter case",
                quoted(name)
            ),
            Self::WrongType(name) => format!("member {name:?} has the wrong type"),
        }
    }
}

/// A name as JSON text, shortened: it goes into an error message.
fn quoted(name: &str) -> String {
    let short: String = name.chars().take(64).collect();
    serde_json::to_string(&short).unwrap_or_default()
}

/// The members of one object, checked against the names the layer reads.
pub(crate) struct Object<'a> {
    members: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> Object<'a> {
    /// Reads a JSON text that must be exactly one object.
    pub(crate) fn from_slice(bytes: &'a [u8], reads: &[&str]) -> Result<Self, ReadError> {
        match serde_json::from_slice::<Members<'a>>(bytes) {
            Ok(Members(members)) => Self::checked(members, reads),
            Err(e) if e.is_data() => Err(ReadError::NotAnObject),
            Err(_) => Err(ReadError::NotJson),
        }
    }

    /// Reads a raw value (already known to be JSON) that must be an object.
    pub(crate) fn from_raw(raw: Raw<'a>, reads: &[&str]) -> Result<Self, ReadError> {
        if !json::is_object(raw.get()) {
            return Err(ReadError::NotAnObject);
        }
        Self::from_slice(raw.get().as_bytes(), reads)
    }

    fn checked(members: Vec<(Cow<'a, str>, &'a RawValue)>, reads: &[&str]) -> Result<Self, ReadError> {
        if let Some(name) = first_duplicate(&members) {
            return Err(ReadError::Duplicate(name.to_owned()));
        }
        for (name, _) in &members {
            if !reads.contains(&&**name) && reads.iter().any(|read| folds_to(name, read)) {
                return Err(ReadError::CaseVariant(name.to_string()));
            }
        }
        Ok(Self { members })
    }

    /// The raw value of member `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.members.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }
}

fn first_duplicate<'m>(members: &'m [(Cow<'_, str>, &RawValue)]) -> Option<&'m str> {
    if members.len() <= 16 {
        return members
            .iter()
            .enumerate()
            .find(|(i, (name, _))| members[..*i].iter().any(|(other, _)| other == name))
            .map(|(_, (name, _))| &**name);
    }
    // Bodies can hold many thousands of members; keep this linear.
    let mut seen = HashSet::with_capacity(members.len());
    members
        .iter()
        .map(|(name, _)| &**name)
        .find(|name| !seen.insert(*name))
}

/// Whether `name` equals `read` under Go's case folding (ASCII letters, `ſ`→`s`, `K`→`k`).
fn folds_to(name: &str, read: &str) -> bool {
    if name.is_ascii() {
        return name.eq_ignore_ascii_case(read);
    }
    let fold = |c: char| match c {
        '\u{17F}' => 's',
        '\u{212A}' => 'k',
        c => c.to_ascii_lowercase(),
    };
    let mut expected = read.chars().map(|c| c.to_ascii_lowercase());
    name.chars().all(|c| expected.next() == Some(fold(c))) && expected.next().is_none()
}

/// How many member names [`Names`] keeps inline before it switches to a set.
const INLINE_NAMES: usize = 16;

/// Member names seen in one object so far, and the first problem with them: a duplicate, or a
/// case variant of a name the layer reads. Reading continues after a problem, so that serde still
/// checks the rest of the text (a syntax error later on must still be a syntax error).
struct Names<'a> {
    /// The first names, inline: objects the layer reads have a handful of members.
    inline: [&'a str; INLINE_NAMES],
    count: usize,
    /// Names written with escapes (decoded, so owned): rare.
    decoded: Vec<String>,
    /// Every name, once an object has more than [`INLINE_NAMES`] (bodies can hold thousands).
    index: Option<HashSet<String>>,
    problem: Option<ReadError>,
}

impl Default for Names<'_> {
    fn default() -> Self {
        Self {
            inline: [""; INLINE_NAMES],
            count: 0,
            decoded: Vec::new(),
            index: None,
            problem: None,
        }
    }
}

impl<'a> Names<'a> {
    #[expect(
        clippy::ptr_arg,
        reason = "borrowed names are kept inline, decoded ones are copied"
    )]
    fn see(&mut self, name: &Cow<'a, str>, reads: &[&str]) {
        if self.problem.is_some() {
            return;
        }
        let duplicate = self.insert(name);
        if duplicate {
            self.problem = Some(ReadError::Duplicate(name.to_string()));
        } else if !reads.contains(&&**name) && reads.iter().any(|read| folds_to(name, read)) {
            self.problem = Some(ReadError::CaseVariant(name.to_string()));
        }
    }

    /// Records `name`; whether it was seen before.
    #[expect(
        clippy::ptr_arg,
        reason = "borrowed names are kept inline, decoded ones are copied"
    )]
    fn insert(&mut self, name: &Cow<'a, str>) -> bool {
        if let Some(index) = &mut self.index {
            return !index.insert(name.to_string());
        }
        let seen = self.inline[..self.count].contains(&&**name) || self.decoded.iter().any(|d| d == name);
        match name {
            Cow::Borrowed(borrowed) if self.count < INLINE_NAMES => {
                self.inline[self.count] = borrowed;
                self.count += 1;
            }
            Cow::Owned(owned) if self.decoded.len() < INLINE_NAMES => self.decoded.push(owned.clone()),
            _ => {
                let names = self.inline[..self.count].iter().map(|n| (*n).to_owned());
                let mut index: HashSet<String> = names.chain(self.decoded.drain(..)).collect();
                index.insert(name.to_string());
                self.index = Some(index);
            }
        }
        seen
    }

    fn fail(&mut self, problem: ReadError) {
        self.problem.get_or_insert(problem);
    }
}

/// A request message read in one pass, with only the members the layer reads (every other
/// member is checked as JSON and skipped without being kept).
#[derive(Debug, PartialEq)]
pub(crate) struct Message<'a> {
    pub(crate) id: Option<Raw<'a>>,
    pub(crate) method: Option<Cow<'a, str>>,
    pub(crate) params: ParamsField<'a>,
}

/// What `params` held.
#[derive(Debug, PartialEq)]
pub(crate) enum ParamsField<'a> {
    Absent,
    /// An object, read; `Err` if it is ambiguous or mistyped.
    Object(Result<Params<'a>, ReadError>),
    /// An object with a mistyped member (as `Object(Err(ReadError::WrongType(_)))`) that also
    /// holds a member named `requestState` in some letter case: a method that takes no state may
    /// leave mistyped params unread, but not with a state in them.
    MistypedWithState,
    /// Some other JSON value.
    NotAnObject,
}

/// Reads a body (or a batch element) as one request message, in one pass over the text: by the
/// [fast reader](scan) when the request holds nothing unusual, else by serde_json, which decides
/// every refusal.
pub(crate) fn parse_request(body: &[u8]) -> Result<Message<'_>, ReadError> {
    match scan::request(body) {
        Some(message) => {
            debug_assert_eq!(
                Ok(&message),
                parse_strict(body).as_ref(),
                "the fast reader read {:?} otherwise than serde_json",
                String::from_utf8_lossy(body)
            );
            Ok(message)
        }
        None => parse_strict(body),
    }
}

/// [`parse_request`] by serde_json alone.
pub(crate) fn parse_strict(body: &[u8]) -> Result<Message<'_>, ReadError> {
    // UTF-8 is checked once, up front, for the whole text: serde_json checks only the strings it
    // keeps, and a member it skips must not hide bytes a lenient backend would read.
    let text = simdutf8::basic::from_utf8(body).map_err(|_| ReadError::NotJson)?;
    if json::first_significant(body) != Some(b'{') {
        return match serde_json::from_str::<IgnoredAny>(text) {
            Ok(_) => Err(ReadError::NotAnObject),
            Err(_) => Err(ReadError::NotJson),
        };
    }
    match serde_json::from_str::<Read<Message<'_>>>(text) {
        Ok(Read(Ok(message))) => Ok(message),
        Ok(Read(Err(problem))) => Err(problem),
        Err(e) if e.is_data() => Err(ReadError::NotAnObject),
        Err(_) => Err(ReadError::NotJson),
    }
}

/// A value read by one of the visitors below, or the first problem found while reading it.
struct Read<T>(Result<T, ReadError>);

impl<'de> Deserialize<'de> for Read<Message<'de>> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MessageVisitor;
        impl<'de> Visitor<'de> for MessageVisitor {
            type Value = Read<Message<'de>>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC message")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut names = Names::default();
                let mut message = Message {
                    id: None,
                    method: None,
                    params: ParamsField::Absent,
                };
                while let Some(Name(name)) = map.next_key()? {
                    names.see(&name, REQUEST_MEMBERS);
                    match &*name {
                        "id" => message.id = Some(map.next_value()?),
                        "method" => match json::as_string(map.next_value::<Raw<'_>>()?.get()) {
                            Some(method) => message.method = Some(method),
                            None => names.fail(ReadError::WrongType("method")),
                        },
                        "params" => {
                            let ParamsSlot(params) = map.next_value()?;
                            message.params = params;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(Read(match names.problem {
                    Some(problem) => Err(problem),
                    None => Ok(message),
                }))
            }
        }
        deserializer.deserialize_map(MessageVisitor)
    }
}

/// `params` as it comes: an object read into [`Params`], or any other value, skipped.
struct ParamsSlot<'a>(ParamsField<'a>);

impl<'de> Deserialize<'de> for ParamsSlot<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ParamsVisitor;
        impl<'de> Visitor<'de> for ParamsVisitor {
            type Value = ParamsSlot<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("request params")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut names = Names::default();
                let mut params = Params::default();
                // Tracked apart from `names`, which stops looking at the first problem.
                let mut state_named = false;
                while let Some(Name(name)) = map.next_key()? {
                    names.see(&name, REQUEST_MEMBERS);
                    state_named |= folds_to(&name, "requestState");
                    let slot = match &*name {
                        "name" | "uri" => {
                            let value = json::as_string(map.next_value::<Raw<'_>>()?.get());
                            if value.is_none() {
                                names.fail(ReadError::WrongType(if name == "name" { "name" } else { "uri" }));
                            }
                            if name == "name" {
                                params.name = value;
                            } else {
                                params.uri = value;
                            }
                            continue;
                        }
                        "requestState" => &mut params.request_state,
                        "taskId" => &mut params.task_id,
                        "notifications" => &mut params.notifications,
                        "_meta" => &mut params.meta,
                        "arguments" => &mut params.arguments,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value()?);
                }
                Ok(ParamsSlot(match names.problem {
                    Some(ReadError::WrongType(_)) if state_named => ParamsField::MistypedWithState,
                    Some(problem) => ParamsField::Object(Err(problem)),
                    None => ParamsField::Object(Ok(params)),
                }))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ParamsSlot(ParamsField::NotAnObject))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(ParamsSlot(ParamsField::NotAnObject))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(ParamsSlot(ParamsField::NotAnObject))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(ParamsSlot(ParamsField::NotAnObject))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(ParamsSlot(ParamsField::NotAnObject))
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(ParamsSlot(ParamsField::NotAnObject))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(ParamsSlot(ParamsField::NotAnObject))
            }
        }
        deserializer.deserialize_any(ParamsVisitor)
    }
}

/// The request parameters the layer reads.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Params<'a> {
    pub(crate) name: Option<Cow<'a, str>>,
    pub(crate) uri: Option<Cow<'a, str>>,
    /// Present-but-`null` is kept as `Some("null")`: only a string can be an envelope.
    pub(crate) request_state: Option<Raw<'a>>,
    pub(crate) task_id: Option<Raw<'a>>,
    pub(crate) notifications: Option<Raw<'a>>,
    pub(crate) meta: Option<Raw<'a>>,
    pub(crate) arguments: Option<Raw<'a>>,
}

/// A backend's answer (or one element of it), read in one pass, with only the members the layer
/// reads.
#[derive(Debug, PartialEq)]
pub(crate) struct Answer<'a> {
    pub(crate) id: Option<Raw<'a>>,
    pub(crate) result: ResultField<'a>,
}

/// What `result` held.
#[derive(Debug, PartialEq)]
pub(crate) enum ResultField<'a> {
    Absent,
    /// An object, read; `Err` if it is ambiguous or mistyped.
    Object(Result<ResultHead<'a>, ReadError>),
    /// Some other JSON value.
    NotAnObject,
}

/// The members of a result the layer reads.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ResultHead<'a> {
    /// `resultType`, raw (a string, checked): where a missing `requestState` is added after.
    pub(crate) result_type_raw: Option<Raw<'a>>,
    pub(crate) result_type: Option<Cow<'a, str>>,
    pub(crate) request_state: Option<Raw<'a>>,
    pub(crate) task_id: Option<Raw<'a>>,
    pub(crate) ttl_ms: Option<Raw<'a>>,
}

/// Reads a backend's answer (or one element of it) as one response message, in one pass.
pub(crate) fn parse_answer(body: &[u8]) -> Result<Answer<'_>, ReadError> {
    match scan::answer(body) {
        Some(answer) => {
            debug_assert_eq!(
                Ok(&answer),
                parse_answer_strict(body).as_ref(),
                "the fast reader read {:?} otherwise than serde_json",
                String::from_utf8_lossy(body)
            );
            Ok(answer)
        }
        None => parse_answer_strict(body),
    }
}

/// [`parse_answer`] by serde_json alone.
pub(crate) fn parse_answer_strict(body: &[u8]) -> Result<Answer<'_>, ReadError> {
    let text = simdutf8::basic::from_utf8(body).map_err(|_| ReadError::NotJson)?;
    if json::first_significant(body) != Some(b'{') {
        return match serde_json::from_str::<IgnoredAny>(text) {
            Ok(_) => Err(ReadError::NotAnObject),
            Err(_) => Err(ReadError::NotJson),
        };
    }
    match serde_json::from_str::<Read<Answer<'_>>>(text) {
        Ok(Read(Ok(answer))) => Ok(answer),
        Ok(Read(Err(problem))) => Err(problem),
        Err(e) if e.is_data() => Err(ReadError::NotAnObject),
        Err(_) => Err(ReadError::NotJson),
    }
}

impl<'de> Deserialize<'de> for Read<Answer<'de>> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AnswerVisitor;
        impl<'de> Visitor<'de> for AnswerVisitor {
            type Value = Read<Answer<'de>>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC message")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut names = Names::default();
                let mut answer = Answer {
                    id: None,
                    result: ResultField::Absent,
                };
                while let Some(Name(name)) = map.next_key()? {
                    names.see(&name, RESULT_MEMBERS);
                    match &*name {
                        "id" => answer.id = Some(map.next_value()?),
                        "result" => {
                            let ResultSlot(result) = map.next_value()?;
                            answer.result = result;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(Read(match names.problem {
                    Some(problem) => Err(problem),
                    None => Ok(answer),
                }))
            }
        }
        deserializer.deserialize_map(AnswerVisitor)
    }
}

/// `result` as it comes: an object read into [`ResultHead`], or any other value, skipped.
struct ResultSlot<'a>(ResultField<'a>);

impl<'de> Deserialize<'de> for ResultSlot<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ResultVisitor;
        impl<'de> Visitor<'de> for ResultVisitor {
            type Value = ResultSlot<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a result")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut names = Names::default();
                let mut head = ResultHead::default();
                while let Some(Name(name)) = map.next_key()? {
                    names.see(&name, RESULT_MEMBERS);
                    let slot = match &*name {
                        "resultType" => {
                            let raw: Raw<'_> = map.next_value()?;
                            match json::as_string(raw.get()) {
                                Some(value) => head.result_type = Some(value),
                                None => names.fail(ReadError::WrongType("resultType")),
                            }
                            head.result_type_raw = Some(raw);
                            continue;
                        }
                        "requestState" => &mut head.request_state,
                        "taskId" => &mut head.task_id,
                        "ttlMs" => &mut head.ttl_ms,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value()?);
                }
                Ok(ResultSlot(ResultField::Object(match names.problem {
                    Some(problem) => Err(problem),
                    None => Ok(head),
                })))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ResultSlot(ResultField::NotAnObject))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(ResultSlot(ResultField::NotAnObject))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(ResultSlot(ResultField::NotAnObject))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(ResultSlot(ResultField::NotAnObject))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(ResultSlot(ResultField::NotAnObject))
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(ResultSlot(ResultField::NotAnObject))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(ResultSlot(ResultField::NotAnObject))
            }
        }
        deserializer.deserialize_any(ResultVisitor)
    }
}

/// Reads `params.notifications` of a `subscriptions/listen`: the task filter, if any.
pub(crate) fn parse_listen_task_ids(raw: Raw<'_>) -> Result<Option<Raw<'_>>, ReadError> {
    Ok(Object::from_raw(raw, REQUEST_MEMBERS)?
        .get("taskIds")
        .map(Raw::from))
}

/// Whether one response message holds something the layer would have to seal (an
/// `input_required` or task result), or cannot be read well enough to tell.
///
/// Callers ask only about messages the needle pre-filter flagged. A message that is not a
/// readable object is judged unsafe too: a client may read the same bytes another way, as an
/// event stream (the TypeScript SDK takes any `Content-Type` containing `text/event-stream` for
/// one, `application/json; x=text/event-stream` included) whose `data:` lines hold the result.
pub(crate) fn needs_sealing(message: &[u8]) -> bool {
    let Ok(answer) = parse_answer(message) else {
        return true;
    };
    match answer.result {
        ResultField::Object(Ok(head)) => {
            matches!(head.result_type.as_deref(), Some("input_required" | "task"))
        }
        ResultField::Object(Err(_)) => true,
        ResultField::Absent | ResultField::NotAnObject => false,
    }
}

/// Whether a request's `_meta` declares the Tasks extension (`io.modelcontextprotocol/tasks`) among
/// the client's capabilities, as an object under `clientCapabilities.extensions`.
pub(crate) fn declares_tasks_extension(meta: Option<Raw<'_>>) -> bool {
    let Some(meta) = meta.and_then(|m| serde_json::from_str::<serde_json::Value>(m.get()).ok()) else {
        return false;
    };
    meta.pointer("/io.modelcontextprotocol~1clientCapabilities/extensions/io.modelcontextprotocol~1tasks")
        .is_some_and(serde_json::Value::is_object)
}

/// Replaces the task ids `handles` knows (backend id → raw contents of the client's handle) where
/// task ids sit: string values of `taskId` members and elements of `taskIds` arrays, at any
/// depth. Every other string, a tool's output that happens to equal an id included, is kept.
/// `None` when nothing changed.
pub(crate) fn map_task_ids(json: &[u8], handles: &HashMap<String, String>) -> Option<Bytes> {
    json::map_member_strings(json, |name, position, value| match (name, position) {
        ("taskId", Position::Member) | ("taskIds", Position::Element) => handles.get(value).cloned(),
        _ => None,
    })
}

/// Writes a JSON-RPC error response. `id` is the raw JSON id of the request (`null` if none).
pub(crate) fn error_body(id: Option<&str>, code: i64, message: &str) -> Bytes {
    error_body_with_data(id, code, message, None)
}

/// Writes a JSON-RPC error response with an optional raw JSON `data` member.
pub(crate) fn error_body_with_data(id: Option<&str>, code: i64, message: &str, data: Option<&str>) -> Bytes {
    let message = serde_json::to_string(message).unwrap_or_else(|_| "\"error\"".to_owned());
    let data = data.map(|d| format!(r#","data":{d}"#)).unwrap_or_default();
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":{code},"message":{message}{data}}}}}"#,
        id.unwrap_or("null")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `params` as the layer does: inside a request.
    fn parse_params(raw: &RawValue) -> Result<Params<'_>, ReadError> {
        let body = format!(r#"{{"method":"x","params":{}}}"#, raw.get());
        // The test keeps the text alive for as long as the params borrow it.
        let body: &'static str = Box::leak(body.into_boxed_str());
        match parse_request(body.as_bytes())?.params {
            ParamsField::Object(params) => params,
            ParamsField::NotAnObject => Err(ReadError::NotAnObject),
            ParamsField::MistypedWithState => Err(ReadError::WrongType("beside requestState")),
            ParamsField::Absent => unreachable!("params are present"),
        }
    }

    #[test]
    fn a_mistyped_member_beside_a_state_is_told_apart() {
        let read = |params: &str| {
            let raw: &RawValue = serde_json::from_str(params).unwrap();
            parse_params(raw).err()
        };
        assert_eq!(read(r#"{"name":7}"#), Some(ReadError::WrongType("name")));
        assert_eq!(
            read(r#"{"uri":"\ud800","x":1}"#),
            Some(ReadError::WrongType("uri"))
        );
        for params in [
            r#"{"name":7,"requestState":"s"}"#,
            r#"{"requestState":"s","uri":[]}"#,
            r#"{"name":7,"REQUESTSTATE":"s"}"#,
            r#"{"uri":"\ud800","request\u0053tate":"s"}"#,
        ] {
            assert_eq!(
                read(params),
                Some(ReadError::WrongType("beside requestState")),
                "{params}"
            );
        }
        // Other problems keep their own refusals.
        assert_eq!(
            read(r#"{"requestState":"s","requestState":"t","name":7}"#),
            Some(ReadError::Duplicate("requestState".into()))
        );
    }

    #[test]
    fn arrays_are_not_read_as_messages_or_params() {
        assert_eq!(
            parse_request(br#"[1,"tools/call",{}]"#).err(),
            Some(ReadError::NotAnObject)
        );
        let raw: &RawValue = serde_json::from_str(r#"["n","u","mrtr2.x"]"#).unwrap();
        assert!(matches!(parse_params(raw), Err(ReadError::NotAnObject)));
    }

    #[test]
    fn syntax_errors_are_not_json() {
        for body in [
            &b"\xEF\xBB\xBF{}"[..],
            b"{} x",
            b"{\"a\":\"\xFF\"}",
            b"{\x00\"\x00}\x00",
        ] {
            assert_eq!(parse_request(body).err(), Some(ReadError::NotJson), "{body:?}");
        }
    }

    #[test]
    fn duplicate_members_make_a_message_unreadable() {
        assert_eq!(
            parse_request(br#"{"method":"a","method":"b"}"#).err(),
            Some(ReadError::Duplicate("method".into()))
        );
        let raw: &RawValue = serde_json::from_str(r#"{"requestState":"a","request\u0053tate":"b"}"#).unwrap();
        assert!(matches!(parse_params(raw), Err(ReadError::Duplicate(_))));
        let many: String = format!(
            "{{{}\"k0\":1}}",
            (0..100).map(|i| format!("\"k{i}\":1,")).collect::<String>()
        );
        assert_eq!(
            parse_request(many.as_bytes()).err(),
            Some(ReadError::Duplicate("k0".into()))
        );
    }

    #[test]
    fn case_variants_of_read_members_are_refused() {
        for name in [
            "RequestState",
            "REQUESTSTATE",
            "requeſtState",
            "taskIDS",
            "\u{212A}",
        ] {
            let params = format!(r#"{{"{name}":"x"}}"#);
            let raw: &RawValue = serde_json::from_str(&params).unwrap();
            let expected = name != "\u{212A}";
            assert_eq!(
                matches!(parse_params(raw), Err(ReadError::CaseVariant(_))),
                expected,
                "{name}"
            );
        }
        assert!(matches!(
            parse_request(br#"{"Method":"tools/call"}"#),
            Err(ReadError::CaseVariant(_))
        ));
        assert!(matches!(
            parse_answer(br#"{"result":{"ResultType":"input_required"}}"#).map(|a| a.result),
            Ok(ResultField::Object(Err(ReadError::CaseVariant(_))))
        ));
        // Names the layer does not read may be spelled any way.
        assert!(parse_request(br#"{"method":"x","params":{"Cursor":1,"ARGS":2}}"#).is_ok());
        assert!(folds_to("TAS\u{212A}ID", "taskId"));
        assert!(!folds_to("taskI", "taskId"));
        assert!(!folds_to("taskIdd", "taskId"));
    }

    #[test]
    fn null_state_is_present() {
        let raw: &RawValue = serde_json::from_str(r#"{"requestState":null}"#).unwrap();
        assert_eq!(parse_params(raw).unwrap().request_state.unwrap().get(), "null");
        let raw: &RawValue = serde_json::from_str(r#"{}"#).unwrap();
        assert!(parse_params(raw).unwrap().request_state.is_none());
    }

    #[test]
    fn escaped_keys_are_decoded() {
        let msg = parse_request(br#"{"m\u0065thod":"tools/call","id":1}"#).unwrap();
        assert_eq!(msg.method.as_deref(), Some("tools/call"));
        assert!(response_is_candidate(
            br#"{"result":{"resultType":"input\u005frequired"}}"#
        ));
    }

    #[test]
    fn results_that_need_sealing() {
        assert!(needs_sealing(
            br#"{"id":1,"result":{"resultType":"input_required"}}"#
        ));
        assert!(needs_sealing(
            br#"{"id":1,"result":{"resultType":"task","taskId":"t"}}"#
        ));
        assert!(needs_sealing(
            br#"{"id":1,"result":{"resultType":"complete","RequestState":"s"}}"#
        ));
        assert!(needs_sealing(
            br#"{"id":1,"result":{"resultType":"x","resultType":"y"}}"#
        ));
        assert!(!needs_sealing(br#"{"id":1,"result":{"resultType":"complete"}}"#));
        assert!(!needs_sealing(
            br#"{"id":1,"error":{"code":1,"message":"input_required"}}"#
        ));
        // Unreadable as JSON, readable as an event stream: unsafe.
        assert!(needs_sealing(
            b"data: {\"id\":1,\"result\":{\"resultType\":\"input_required\"}}\n\n"
        ));
    }

    #[test]
    fn tasks_extension_declaration() {
        let yes: &RawValue = serde_json::from_str(
            r#"{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#,
        )
        .unwrap();
        assert!(declares_tasks_extension(Some(Raw::from(yes))));
        for no in [
            r#"{}"#,
            r#"{"io.modelcontextprotocol/clientCapabilities":{}}"#,
            r#"{"io.modelcontextprotocol/clientCapabilities":{"tasks":{}}}"#,
            r#"{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":true}}}"#,
        ] {
            let raw: &RawValue = serde_json::from_str(no).unwrap();
            assert!(!declares_tasks_extension(Some(Raw::from(raw))), "{no}");
        }
        assert!(!declares_tasks_extension(None));
    }

    #[test]
    fn error_bodies_are_valid_json_rpc() {
        let body = error_body(Some(r#""c-1""#), -32602, "Invalid \"requestState\"");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["id"], "c-1");
        assert_eq!(v["error"]["code"], -32602);
        let v: serde_json::Value = serde_json::from_slice(&error_body(None, -32600, "x")).unwrap();
        assert!(v["id"].is_null());
    }
}
