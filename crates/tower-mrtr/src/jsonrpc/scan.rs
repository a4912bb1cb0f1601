//! The fast reader: one pass over the bytes of a request, or of an answer, that holds nothing
//! unusual.
//!
//! [`parse_request`](super::parse_request) and [`parse_answer`](super::parse_answer) ask this
//! reader first. It checks the whole text as JSON, as strictly as the serde reader does (UTF-8;
//! strings without control characters, with valid escapes; the number grammar of RFC 8259;
//! `true`, `false`, `null`; nothing but whitespace after the value), and reads the members the
//! layer needs, but only from a message it can read without any doubt:
//!
//! * every member name of the message and of its `params` (a request) or `result` (an answer) is
//!   ASCII, written without escapes, appears once, and is not a case variant of a name the layer
//!   reads ([`REQUEST_MEMBERS`], [`RESULT_MEMBERS`]: with ASCII only and no escapes, the only
//!   variants are ASCII ones);
//! * `method`, `name`, `uri` and `resultType` are strings written without escapes;
//! * those objects have at most [`MAX_MEMBERS`] members, and nothing nests deeper than
//!   [`MAX_DEPTH`].
//!
//! For anything else, every text that is not JSON included, it answers `None` and the serde
//! reader reads the message and decides, refusals included. So this reader refuses nothing and
//! can accept nothing the serde reader would refuse: it reads the same [`Message`] or [`Answer`]
//! from what it accepts, and only skips the serde reader's cost. Debug builds (every test run and
//! every fuzz target) read each accepted message with the serde reader too and assert that the
//! two agree.
//!
//! Written by hand rather than with a JSON crate: on messages of MCP's shape (a few hundred bytes
//! of short strings and small objects) serde_json's visitors take twice as long to read one, and
//! the SIMD parsers simd-json and sonic-rs take as long as this whole reader just to validate it,
//! with the reading still to do (`docs/benchmarks-log.md`, "Reading requests and answers"). UTF-8 is
//! checked by `simdutf8`.

use std::borrow::Cow;

use super::{Answer, Message, Params, ParamsField, REQUEST_MEMBERS, RESULT_MEMBERS, ResultField, ResultHead};
use crate::json::Raw;

/// Deepest nesting this reader follows (serde_json stops at 128).
pub(crate) const MAX_DEPTH: usize = 64;

/// Most members of the request, or of its `params`, this reader keeps apart.
pub(crate) const MAX_MEMBERS: usize = 16;

/// Reads `body` as one request message if it holds nothing unusual (see the module docs);
/// `None` leaves the decision to the serde reader.
pub(crate) fn request(body: &[u8]) -> Option<Message<'_>> {
    let text = simdutf8::basic::from_utf8(body).ok()?;
    let mut scan = Scanner { text, pos: 0 };
    scan.whitespace();
    scan.eat(b'{')?;
    let mut message = Message {
        id: None,
        method: None,
        params: ParamsField::Absent,
    };
    let mut names = Names::new(&REQUEST_BY_LENGTH);
    scan.members(|scan, name| {
        names.add(name)?;
        match name {
            "id" => message.id = Some(scan.raw_value(1)?),
            "method" => message.method = Some(Cow::Borrowed(scan.plain_string()?)),
            "params" => message.params = scan.params()?,
            _ => scan.value(1)?,
        }
        Some(())
    })?;
    scan.end()?;
    Some(message)
}

/// Reads `body` as one response message if it holds nothing unusual (see the module docs);
/// `None` leaves the decision to the serde reader.
pub(crate) fn answer(body: &[u8]) -> Option<Answer<'_>> {
    let text = simdutf8::basic::from_utf8(body).ok()?;
    let mut scan = Scanner { text, pos: 0 };
    scan.whitespace();
    scan.eat(b'{')?;
    let mut answer = Answer {
        id: None,
        result: ResultField::Absent,
    };
    let mut names = Names::new(&RESULT_BY_LENGTH);
    scan.members(|scan, name| {
        names.add(name)?;
        match name {
            "id" => answer.id = Some(scan.raw_value(1)?),
            "result" => answer.result = scan.result()?,
            _ => scan.value(1)?,
        }
        Some(())
    })?;
    scan.end()?;
    Some(answer)
}

/// Member names of one object so far.
struct Names<'a> {
    seen: [&'a str; MAX_MEMBERS],
    count: usize,
    /// The names the layer reads in this object, by length.
    reads: &'static ByLength,
}

impl<'a> Names<'a> {
    fn new(reads: &'static ByLength) -> Self {
        Self {
            seen: [""; MAX_MEMBERS],
            count: 0,
            reads,
        }
    }

    /// Records `name` (ASCII, from [`Scanner::name`]); `None` if it was seen before, is a case
    /// variant of a name the layer reads, or is one too many.
    fn add(&mut self, name: &'a str) -> Option<()> {
        if self.count == MAX_MEMBERS
            || self.seen[..self.count].contains(&name)
            || is_variant(self.reads, name)
        {
            return None;
        }
        self.seen[self.count] = name;
        self.count += 1;
        Some(())
    }
}

/// Whether an ASCII `name` is a case variant of one of `reads`.
fn is_variant(reads: &ByLength, name: &str) -> bool {
    let Some(candidates) = reads.get(name.len()) else {
        return false;
    };
    // Names of one length differ in more than case (a test says so), so a name that is one of
    // them exactly is no variant of another.
    !candidates.contains(&name) && candidates.iter().any(|read| read.eq_ignore_ascii_case(name))
}

/// Names the layer reads, by length (empty slots are `""`): a case variant of an ASCII name has
/// the name's length.
type ByLength = [[&'static str; 3]; 16];

/// [`REQUEST_MEMBERS`] by length.
const REQUEST_BY_LENGTH: ByLength = by_length(REQUEST_MEMBERS);

/// [`RESULT_MEMBERS`] by length.
const RESULT_BY_LENGTH: ByLength = by_length(RESULT_MEMBERS);

const fn by_length(names: &[&'static str]) -> ByLength {
    let mut table = [[""; 3]; 16];
    let mut i = 0;
    while i < names.len() {
        let name = names[i];
        let mut slot = 0;
        // A fourth name of one length, or a name of 16 bytes or more, fails the build here.
        while !table[name.len()][slot].is_empty() {
            slot += 1;
        }
        table[name.len()][slot] = name;
        i += 1;
    }
    table
}

/// Where the first quote, backslash or control character of `bytes` is (with `NAME`, also the
/// first byte that is not ASCII), `bytes.len()` if none; eight bytes at a time: in each word, the
/// lowest byte flagged by the usual has-zero and has-less-than bit tricks is exact (only bytes
/// above a true hit can be flagged falsely).
fn stop<const NAME: bool>(bytes: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v;
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        let quote = has_zero(word ^ (ONES * u64::from(b'"')));
        let backslash = has_zero(word ^ (ONES * u64::from(b'\\')));
        let control = word.wrapping_sub(ONES * 0x20) & !word;
        let beyond_ascii = if NAME { word } else { 0 };
        let hits = (quote | backslash | control | beyond_ascii) & HIGHS;
        if hits != 0 {
            return at + (hits.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    let rest = chunks.remainder();
    at + rest
        .iter()
        .position(|b| matches!(b, b'"' | b'\\' | 0..=0x1f) || (NAME && !b.is_ascii()))
        .unwrap_or(rest.len())
}

/// A cursor over the text; every method returns `None` at the first byte it does not accept.
struct Scanner<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    /// Nothing but whitespace up to the end.
    fn end(&mut self) -> Option<()> {
        self.whitespace();
        (self.pos == self.text.len()).then_some(())
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.pos += 1;
        }
    }

    /// The members of an object whose `{` was just read: each [name](Self::name) is handed to
    /// `member`, which reads the value.
    fn members(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.whitespace();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let name = self.name()?;
            self.whitespace();
            self.eat(b':')?;
            self.whitespace();
            member(self, name)?;
            self.whitespace();
            match self.peek()? {
                b',' => {
                    self.pos += 1;
                    self.whitespace();
                }
                b'}' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `params`: an object read member by member, or any other value.
    fn params(&mut self) -> Option<ParamsField<'a>> {
        if self.eat(b'{').is_none() {
            self.other_than_object()?;
            return Some(ParamsField::NotAnObject);
        }
        let mut params = Params::default();
        let mut names = Names::new(&REQUEST_BY_LENGTH);
        self.members(|scan, name| {
            names.add(name)?;
            let slot = match name {
                "name" => {
                    params.name = Some(Cow::Borrowed(scan.plain_string()?));
                    return Some(());
                }
                "uri" => {
                    params.uri = Some(Cow::Borrowed(scan.plain_string()?));
                    return Some(());
                }
                "requestState" => &mut params.request_state,
                "taskId" => &mut params.task_id,
                "notifications" => &mut params.notifications,
                "_meta" => &mut params.meta,
                "arguments" => &mut params.arguments,
                _ => return scan.value(2),
            };
            *slot = Some(scan.raw_value(2)?);
            Some(())
        })?;
        Some(ParamsField::Object(Ok(params)))
    }

    /// `result`: an object read member by member, or any other value.
    fn result(&mut self) -> Option<ResultField<'a>> {
        if self.eat(b'{').is_none() {
            self.other_than_object()?;
            return Some(ResultField::NotAnObject);
        }
        let mut head = ResultHead::default();
        let mut names = Names::new(&RESULT_BY_LENGTH);
        self.members(|scan, name| {
            names.add(name)?;
            let slot = match name {
                "resultType" => {
                    let start = scan.pos;
                    head.result_type = Some(Cow::Borrowed(scan.plain_string()?));
                    head.result_type_raw = Some(Raw::checked(scan.text.get(start..scan.pos)?));
                    return Some(());
                }
                "requestState" => &mut head.request_state,
                "taskId" => &mut head.task_id,
                "ttlMs" => &mut head.ttl_ms,
                _ => return scan.value(2),
            };
            *slot = Some(scan.raw_value(2)?);
            Some(())
        })?;
        Some(ResultField::Object(Ok(head)))
    }

    /// A `params` or `result` that is not an object. The serde reader takes such a value as it
    /// comes (`deserialize_any`), which decodes a string (an unpaired surrogate escape is then an
    /// error) and reads a number as a double (`1e400` is then an error), where a value it skips
    /// is only checked for syntax: this reader leaves escaped strings and numbers to it.
    fn other_than_object(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.plain_string().map(drop),
            b'-' | b'0'..=b'9' => None,
            _ => self.value(1),
        }
    }

    /// One value, checked, as its text.
    fn raw_value(&mut self, depth: usize) -> Option<Raw<'a>> {
        let start = self.pos;
        self.value(depth)?;
        Some(Raw::checked(self.text.get(start..self.pos)?))
    }

    /// Checks one value; `depth` is the nesting of the container holding it.
    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.string(),
            b'{' if depth < MAX_DEPTH => {
                self.pos += 1;
                self.object(depth + 1)
            }
            b'[' if depth < MAX_DEPTH => {
                self.pos += 1;
                self.array(depth + 1)
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        self.whitespace();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            self.string()?;
            self.whitespace();
            self.eat(b':')?;
            self.whitespace();
            self.value(depth)?;
            self.whitespace();
            match self.peek()? {
                b',' => {
                    self.pos += 1;
                    self.whitespace();
                }
                b'}' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.whitespace();
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            self.value(depth)?;
            self.whitespace();
            match self.peek()? {
                b',' => {
                    self.pos += 1;
                    self.whitespace();
                }
                b']' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A member name of the request or its `params`: a [plain string](Self::plain_string) that
    /// is ASCII too.
    fn name(&mut self) -> Option<&'a str> {
        self.unescaped::<true>()
    }

    /// A string written without escapes, as its contents.
    fn plain_string(&mut self) -> Option<&'a str> {
        self.unescaped::<false>()
    }

    fn unescaped<const NAME: bool>(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.pos;
        let rest = self.text.as_bytes().get(start..)?;
        let len = stop::<NAME>(rest);
        if rest.get(len) != Some(&b'"') {
            return None;
        }
        self.pos = start + len + 1;
        self.text.get(start..start + len)
    }

    /// Checks a string, escapes included (what serde_json accepts in a string it skips).
    fn string(&mut self) -> Option<()> {
        self.pos += 1;
        loop {
            let rest = self.text.as_bytes().get(self.pos..)?;
            let len = stop::<false>(rest);
            self.pos += len + 1;
            match rest.get(len)? {
                b'"' => return Some(()),
                b'\\' => self.escape()?,
                _ => return None,
            }
        }
    }

    /// The rest of an escape whose backslash was just read.
    fn escape(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.pos += 1,
            b'u' => {
                let hex = self.text.as_bytes().get(self.pos + 1..self.pos + 5)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                self.pos += 5;
            }
            _ => return None,
        }
        Some(())
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.text
            .as_bytes()
            .get(self.pos..)?
            .starts_with(word)
            .then(|| self.pos += word.len())
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Option<()> {
        let _ = self.eat(b'-');
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::{parse_answer_strict, parse_strict};

    /// Requests of the shapes clients send: the fast reader must take them (else it is dead
    /// weight) and read them exactly as the serde reader does.
    const TAKEN: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{"size":256},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}"#,
        r#"{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"confirm","arguments":{"seed":1,"stateSize":256},"inputResponses":{"confirm":{"action":"accept","content":{"confirm":true}}},"requestState":"mrtr4.AAAA"}}"#,
        r#" { "jsonrpc" : "2.0" , "id" : null , "method" : "tools/list" } "#,
        "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"method\": \"resources/read\",\n  \"params\": {\"uri\": \"file:///é.txt\"}\n}",
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"x\"y\u00e9\n"}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"t","_meta":{}}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"x","params":[1,2]}"#,
        r#"{"jsonrpc":"2.0","id":-0.5e+3,"method":"x","params":{"a":[true,false,null,-1,0.25,1E9,{"b":[]}]}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        r#"{}"#,
    ];

    /// Texts it must leave to the serde reader: each is refused by it, or read with a decoding
    /// this reader does not do.
    const LEFT: &[&[u8]] = &[
        br#"{"m\u0065thod":"tools/call"}"#,
        br#"{"method":"tools\/call"}"#,
        br#"{"method":"a","method":"b"}"#,
        br#"{"Method":"a"}"#,
        br#"{"params":{"RequestState":"s"}}"#,
        "{\"params\":{\"reque\u{17F}tState\":\"s\"}}".as_bytes(),
        br#"{"params":{"name":7}}"#,
        br#"{"method":1}"#,
        br#"{"params":{"a":1,"a":2}}"#,
        br#"[{"method":"x"}]"#,
        b"\xEF\xBB\xBF{}",
        b"{} x",
        b"{\"a\":\"\x01\"}",
        b"{\"a\":\"\xFF\"}",
        br#"{"a":01}"#,
        br#"{"a":1.}"#,
        br#"{"a":.5}"#,
        br#"{"a":1e}"#,
        br#"{"a":-}"#,
        br#"{"a":"\x"}"#,
        br#"{"a":"\u12G4"}"#,
        br#"{"a":[1,]}"#,
        br#"{"a":1,}"#,
        br#"{"a" 1}"#,
        br#"{"a":tru}"#,
        br#"{"a":nul"#,
        br#"{"a":"x"#,
        b"",
        // Read as they come by serde (decoded, or as a double), where a skipped value is not:
        // found by the json_readers fuzz target.
        br#"{"params":"input\u005f\ud800ed"}"#,
        br#"{"params":1e400}"#,
    ];

    /// Answers of the shapes backends send.
    const TAKEN_ANSWERS: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":17,"result":{"resultType":"input_required","inputRequests":{"confirm":{"method":"elicitation/create","params":{"mode":"form","message":"Proceed?","requestedSchema":{"type":"object","properties":{"confirm":{"type":"boolean"}},"required":["confirm"]}}}},"requestState":"abc"}}"#,
        r#"{"jsonrpc":"2.0","id":"x","result":{"content":[{"type":"text","text":"a \"quoted\" input_required\n"}],"isError":false}}"#,
        r#"{"jsonrpc":"2.0","id":3,"result":{"resultType":"task","taskId":"t-1","ttlMs":60000}}"#,
        r#"{"jsonrpc":"2.0","id":3,"result":[1,2]}"#,
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"input_required"}}"#,
        r#"{"jsonrpc":"2.0","id":3,"result":{"resultType":"complete","requestState":null}}"#,
    ];

    /// Answers it must leave to the serde reader.
    const LEFT_ANSWERS: &[&[u8]] = &[
        br#"{"result":{"resultType":"input\u005frequired"}}"#,
        br#"{"result":{"ResultType":"input_required"}}"#,
        br#"{"result":{"resultType":"a","resultType":"b"}}"#,
        br#"{"result":{"resultType":7}}"#,
        br#"{"Result":{}}"#,
        br#"{"result":{"requestState":"s"},"result":{}}"#,
        b"data: {\"result\":{}}\n\n",
        br#"{"result":{"requestState":"s"}} {}"#,
        br#"{"result":"\ud800"}"#,
        br#"{"result":-1e400}"#,
    ];

    #[test]
    fn takes_the_usual_answers_and_reads_them_as_the_serde_reader_does() {
        for text in TAKEN_ANSWERS {
            let fast = answer(text.as_bytes()).unwrap_or_else(|| panic!("not taken: {text}"));
            assert_eq!(Ok(fast), parse_answer_strict(text.as_bytes()), "{text}");
        }
        for text in LEFT_ANSWERS {
            assert!(answer(text).is_none(), "{}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn takes_the_usual_requests_and_reads_them_as_the_serde_reader_does() {
        for text in TAKEN {
            let fast = request(text.as_bytes()).unwrap_or_else(|| panic!("not taken: {text}"));
            assert_eq!(Ok(fast), parse_strict(text.as_bytes()), "{text}");
        }
    }

    #[test]
    fn leaves_the_rest_to_the_serde_reader() {
        for text in LEFT {
            assert!(request(text).is_none(), "{}", String::from_utf8_lossy(text));
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(request(deep.as_bytes()).is_none());
        assert!(parse_strict(deep.as_bytes()).is_ok());
        let wide: String = format!(
            "{{{}\"z\":0}}",
            (0..MAX_MEMBERS)
                .map(|i| format!("\"k{i}\":0,"))
                .collect::<String>()
        );
        assert!(request(wide.as_bytes()).is_none());
        assert!(parse_strict(wide.as_bytes()).is_ok());
    }

    #[test]
    fn names_of_one_length_differ_in_more_than_case() {
        for (i, a) in REQUEST_MEMBERS.iter().enumerate() {
            for b in &REQUEST_MEMBERS[i + 1..] {
                assert!(!a.eq_ignore_ascii_case(b), "{a} {b}");
            }
            assert!(REQUEST_BY_LENGTH[a.len()].contains(a));
        }
        for (i, a) in RESULT_MEMBERS.iter().enumerate() {
            for b in &RESULT_MEMBERS[i + 1..] {
                assert!(!a.eq_ignore_ascii_case(b), "{a} {b}");
            }
            assert!(RESULT_BY_LENGTH[a.len()].contains(a));
        }
        let request = &REQUEST_BY_LENGTH;
        assert!(is_variant(request, "TaskIds") && is_variant(request, "_META"));
        assert!(!is_variant(request, "taskIds") && !is_variant(request, "jsonrpc"));
        assert!(!is_variant(request, "a-name-longer-than-sixteen"));
        assert!(is_variant(&RESULT_BY_LENGTH, "TTLMS") && !is_variant(&RESULT_BY_LENGTH, "_META"));
    }

    #[test]
    fn stops_at_the_first_quote_backslash_or_control_character() {
        for (text, at) in [
            (&b"abcdefgh\\ijk"[..], 8),
            (b"abc\"defghijklmnop\x01", 3),
            (b"abcdefghijklmno\x1f", 15),
            (b"\x7f\xff\"", 2),
            (b"plain", 5),
            (b"", 0),
        ] {
            assert_eq!(stop::<false>(text), at, "{text:?}");
        }
        assert_eq!(stop::<true>("abcdefg\u{e9}\"".as_bytes()), 7);
        assert_eq!(stop::<true>(b"\x80"), 0);
    }

    #[test]
    fn nesting_up_to_the_limit_is_read() {
        let depth = MAX_DEPTH - 1;
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(depth), "]".repeat(depth));
        assert!(request(deep.as_bytes()).is_some());
    }

    proptest::proptest! {
        /// Whatever the bytes, what the fast reader accepts the serde reader reads the same.
        #[test]
        fn never_disagrees_with_the_serde_reader(
            which in 0..TAKEN.len(),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            cut in 0usize..4,
            insert in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4),
        ) {
            let mut body = TAKEN[which].as_bytes().to_vec();
            let at = at.index(body.len() + 1);
            let end = (at + cut).min(body.len());
            body.splice(at..end, insert);
            if let Some(fast) = request(&body) {
                proptest::prop_assert_eq!(Ok(fast), parse_strict(&body));
            }
        }

        /// The same for answers.
        #[test]
        fn never_disagrees_with_the_serde_reader_on_answers(
            which in 0..TAKEN_ANSWERS.len(),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            cut in 0usize..4,
            insert in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4),
        ) {
            let mut body = TAKEN_ANSWERS[which].as_bytes().to_vec();
            let at = at.index(body.len() + 1);
            let end = (at + cut).min(body.len());
            body.splice(at..end, insert);
            if let Some(fast) = answer(&body) {
                proptest::prop_assert_eq!(Ok(fast), parse_answer_strict(&body));
            }
        }
    }
}
