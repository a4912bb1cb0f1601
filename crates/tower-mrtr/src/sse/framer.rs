//! Incremental, byte-preserving framer for `text/event-stream` bodies.
//!
//! The relay has to rewrite the data of one event (the JSON-RPC response that
//! carries a `requestState`) and forward every other byte exactly as the
//! backend sent it: comments, `id:`/`event:`/`retry:`, unknown fields, blank
//! lines and whatever mix of CRLF/LF/CR line ends the backend uses. Ordinary SSE
//! parsers decode into events and lose exactly that, so this module frames the
//! stream into *blocks* (the lines of one event up to and including the blank
//! line that dispatches it) and hands out raw bytes.
//!
//! Framing follows the WHATWG "event stream interpretation" rules: a line ends
//! at CRLF, LF or CR, a blank line dispatches, and one UTF-8 BOM at the very
//! start of the stream is not part of any line (it is passed on as its own
//! [`SseItem::Raw`]).
//!
//! Cost model:
//! * Blocks whose bytes contain none of the configured needles are never
//!   parsed. Consecutive such blocks inside one input chunk are forwarded as a
//!   single zero-copy slice of that chunk.
//! * Only a block that straddles chunk boundaries is copied, into one pending
//!   buffer; at most one block is buffered, and its size is capped (see
//!   [`SseFramer::new`]). Besides that, the framer keeps only the ready items,
//!   which are slices of chunks already pushed.
//!
//! Trailing-CR rule: when the blank line that dispatches a block ends with a CR
//! that is the last byte received so far, an LF may still follow and would
//! belong to that same line end. A block that is *not* a candidate is released
//! at once (pass-through never waits for the next byte) and a leading LF of the
//! next chunk is forwarded as raw bytes on its own. A *candidate* is held until
//! the next byte or [`SseFramer::finish`], so that its raw bytes, and therefore
//! any rewrite of it, include that LF. Either way the output is byte-identical
//! to the input and the candidates are the same for every chunking.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};
use memchr::memmem::Finder;
use memchr::{memchr, memchr2};

/// A parser ignores this once, at the very start of the stream.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One piece of output, in stream order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SseItem {
    /// Bytes to forward unchanged: whole non-candidate blocks, blank lines, the
    /// BOM, a lone LF completing a CRLF, an unterminated tail without a needle.
    Raw(Bytes),
    /// One block (possibly cut short by the end of the stream) whose lines
    /// contain a needle.
    Candidate(CandidateEvent),
}

impl SseItem {
    #[cfg(test)]
    /// The item's original bytes, whatever its kind.
    pub(crate) fn raw(&self) -> &Bytes {
        match self {
            SseItem::Raw(bytes) => bytes,
            SseItem::Candidate(event) => event.raw(),
        }
    }
}

/// A block that contains a needle and may be rewritten.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CandidateEvent {
    raw: Bytes,
    terminated: bool,
}

/// The block being buffered grew past the framer's cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EventTooLarge {
    /// The configured `max_event_bytes`.
    pub(crate) limit: usize,
}

impl fmt::Display for EventTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SSE event larger than the {} byte limit", self.limit)
    }
}

impl std::error::Error for EventTooLarge {}

/// [`CandidateEvent::with_data`] was given data containing CR or LF, which
/// would split the single `data:` line and break the stream's framing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DataHasLineBreak;

impl fmt::Display for DataHasLineBreak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("replacement SSE data contains a line break")
    }
}

impl std::error::Error for DataHasLineBreak {}

/// Splits a byte stream into [`SseItem`]s; see the module docs.
pub(crate) struct SseFramer {
    max_event_bytes: usize,
    finders: Vec<Finder<'static>>,
    /// Bytes of the current block that arrived in earlier chunks. At stream
    /// start it holds a partially received BOM instead.
    pending: BytesMut,
    /// `pending` is a complete candidate whose blank line ended with a CR at
    /// the end of the input so far; the next byte decides whether an LF joins it.
    held: bool,
    /// The last byte received was a CR ending a line whose block is not held:
    /// an LF opening the next chunk completes that CRLF.
    after_cr: bool,
    /// The current line has no bytes yet; a line end now makes a blank line.
    line_empty: bool,
    /// No byte after a possible BOM has been seen yet.
    at_stream_start: bool,
    queue: VecDeque<SseItem>,
    poisoned: bool,
    /// After poisoning: bytes consumed but never emitted, in order.
    unframed: Vec<Bytes>,
}

impl SseFramer {
    /// `max_event_bytes` caps one block: the bytes of its lines including
    /// their terminators, not counting the blank line that dispatches it (so
    /// a CRLF split across chunks can't change the verdict). Blocks are
    /// measured the same way whether or not they had to be buffered, which
    /// keeps the outcome independent of chunking.
    ///
    /// `needles`: a block whose lines contain none of them is forwarded
    /// without being parsed. The search covers the block's bytes except the
    /// dispatching blank line, for the same reason. An empty needle makes
    /// every non-blank block a candidate; no needles make it pure pass-through.
    pub(crate) fn new(max_event_bytes: usize, needles: Vec<Vec<u8>>) -> Self {
        Self {
            max_event_bytes,
            finders: needles
                .iter()
                .map(|needle| Finder::new(needle).into_owned())
                .collect(),
            pending: BytesMut::new(),
            held: false,
            after_cr: false,
            line_empty: true,
            at_stream_start: true,
            queue: VecDeque::new(),
            poisoned: false,
            unframed: Vec::new(),
        }
    }

    /// Feeds the next chunk of the body. Chunks may be empty and may split
    /// anything anywhere.
    ///
    /// On `Err` the framer is poisoned: every later `push` fails, `finish`
    /// emits nothing, [`Self::next_item`] still yields the items completed
    /// before the oversized block, and `take_unframed` (tests only) returns the bytes
    /// swallowed since, so a caller may fall back to plain forwarding.
    pub(crate) fn push(&mut self, chunk: Bytes) -> Result<(), EventTooLarge> {
        if self.poisoned {
            return Err(self.too_large());
        }
        let len = chunk.len();
        if len == 0 {
            return Ok(());
        }
        // Next byte to scan; start of the run of raw bytes not yet queued.
        let mut pos = 0;
        let mut raw_start = 0;

        if self.held {
            self.held = false;
            if chunk.first() == Some(&b'\n') {
                self.pending.put_u8(b'\n');
                pos = 1;
                raw_start = 1;
            }
            let raw = self.pending.split().freeze();
            self.queue.push_back(SseItem::Candidate(CandidateEvent {
                raw,
                terminated: true,
            }));
        } else if self.after_cr {
            self.after_cr = false;
            // Completes the CRLF: part of the buffered block if one is open,
            // otherwise raw bytes after an already released block.
            if chunk.first() == Some(&b'\n') {
                pos = 1;
            }
        }
        // Where the current block's bytes start in this chunk (it may have
        // begun in `pending`, then it starts at 0).
        let mut block_start = if self.pending.is_empty() { pos } else { 0 };

        if self.at_stream_start {
            // `pending` holds the BOM bytes matched by earlier chunks.
            let matched = self.pending.len();
            let want = BOM.get(matched..).unwrap_or_default();
            let n = want.iter().zip(chunk.iter()).take_while(|(a, b)| a == b).count();
            if n == want.len() {
                self.at_stream_start = false;
                if matched > 0 {
                    self.pending.extend_from_slice(span(&chunk, 0, n));
                    let bom = self.pending.split().freeze();
                    self.queue.push_back(SseItem::Raw(bom));
                    raw_start = n;
                }
                pos = n;
                block_start = n;
            } else if n == len {
                self.pending.extend_from_slice(&chunk);
                return Ok(());
            } else {
                // Not a BOM: whatever matched is ordinary content of line one.
                self.at_stream_start = false;
                pos = n;
                block_start = 0;
                if matched + n > 0 {
                    self.line_empty = false;
                }
            }
        }

        // Earliest needle start at or after some earlier block start in this
        // chunk (`len` if none); lets a needle-free chunk be searched once.
        let mut needle_at: Option<usize> = None;

        while let Some(rest) = chunk.get(pos..).filter(|rest| !rest.is_empty()) {
            let Some(i) = memchr2(b'\r', b'\n', rest) else {
                self.line_empty = false;
                break;
            };
            let term = pos + i;
            let blank = i == 0 && self.line_empty;
            let mut end = term + 1;
            let mut cr_at_end = false;
            if rest.get(i) == Some(&b'\r') {
                match chunk.get(end) {
                    Some(b'\n') => end += 1,
                    Some(_) => {}
                    None => cr_at_end = true,
                }
            }
            pos = end;
            self.line_empty = true;
            if !blank {
                self.after_cr = cr_at_end;
                continue;
            }

            // A blank line at `term..end` completes the block. Its line end
            // is left out of both the size and the needle search: it may
            // still be incomplete (CR now, LF in the next chunk), and the
            // verdict must not depend on where chunks are split.
            let size = self.pending.len() + (term - block_start);
            if size > self.max_event_bytes {
                return Err(self.poison(&chunk, raw_start, block_start));
            }
            if self.pending.is_empty() {
                // A lone blank line is an empty dispatch, never a candidate.
                let candidate =
                    term > block_start && self.block_has_needle(&chunk, block_start, term, &mut needle_at);
                if candidate {
                    self.flush_raw(&chunk, raw_start, block_start);
                    if cr_at_end {
                        self.pending.extend_from_slice(span(&chunk, block_start, end));
                        self.held = true;
                    } else {
                        self.queue.push_back(SseItem::Candidate(CandidateEvent {
                            raw: chunk.slice(block_start..end),
                            terminated: true,
                        }));
                    }
                    raw_start = end;
                } else {
                    // Stays in the raw run, to be coalesced with its neighbours.
                    self.after_cr = cr_at_end;
                }
            } else {
                self.pending.extend_from_slice(span(&chunk, block_start, end));
                self.flush_raw(&chunk, raw_start, block_start);
                if self.has_needle(self.pending.get(..size).unwrap_or_default()) {
                    if cr_at_end {
                        self.held = true;
                    } else {
                        let raw = self.pending.split().freeze();
                        self.queue.push_back(SseItem::Candidate(CandidateEvent {
                            raw,
                            terminated: true,
                        }));
                    }
                } else {
                    let raw = self.pending.split().freeze();
                    self.queue.push_back(SseItem::Raw(raw));
                    self.after_cr = cr_at_end;
                }
                raw_start = end;
            }
            block_start = end;
        }

        // Keep the start of an unfinished block for the next chunk.
        if block_start < len && !self.held {
            let size = self.pending.len() + (len - block_start);
            if size > self.max_event_bytes {
                return Err(self.poison(&chunk, raw_start, block_start));
            }
            self.flush_raw(&chunk, raw_start, block_start);
            self.pending.extend_from_slice(span(&chunk, block_start, len));
        } else {
            self.flush_raw(&chunk, raw_start, len);
        }
        Ok(())
    }

    /// The next ready item, in stream order.
    pub(crate) fn next_item(&mut self) -> Option<SseItem> {
        self.queue.pop_front()
    }

    /// Ends the input. Queues what is left (a held candidate, or an
    /// unterminated tail: `Raw` without a needle, otherwise a candidate with
    /// `is_terminated() == false`) and returns the next item. Called after
    /// draining [`Self::next_item`], that is the tail itself; otherwise keep
    /// calling `next_item` for the rest.
    pub(crate) fn finish(&mut self) -> Option<SseItem> {
        if !self.poisoned && !self.pending.is_empty() {
            let raw = self.pending.split().freeze();
            let item = if self.held {
                SseItem::Candidate(CandidateEvent {
                    raw,
                    terminated: true,
                })
            } else if self.has_needle(&raw) {
                SseItem::Candidate(CandidateEvent {
                    raw,
                    terminated: false,
                })
            } else {
                SseItem::Raw(raw)
            };
            self.queue.push_back(item);
        }
        self.held = false;
        self.after_cr = false;
        self.line_empty = true;
        self.at_stream_start = false;
        self.queue.pop_front()
    }

    /// After [`EventTooLarge`]: the bytes received but not emitted as items
    /// (the oversized block so far and the rest of the chunk that overflowed),
    /// in order. Empty if the framer is not poisoned.
    #[cfg(test)]
    pub(crate) fn take_unframed(&mut self) -> Vec<Bytes> {
        std::mem::take(&mut self.unframed)
    }

    #[cfg(test)]
    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    fn too_large(&self) -> EventTooLarge {
        EventTooLarge {
            limit: self.max_event_bytes,
        }
    }

    fn poison(&mut self, chunk: &Bytes, raw_start: usize, block_start: usize) -> EventTooLarge {
        self.flush_raw(chunk, raw_start, block_start);
        self.poisoned = true;
        self.held = false;
        if !self.pending.is_empty() {
            self.unframed.push(self.pending.split().freeze());
        }
        if let Some(rest) = chunk.get(block_start..).filter(|rest| !rest.is_empty()) {
            self.unframed.push(chunk.slice_ref(rest));
        }
        self.pending = BytesMut::new();
        self.too_large()
    }

    /// Queues `chunk[from..to]` as raw bytes, if non-empty.
    fn flush_raw(&mut self, chunk: &Bytes, from: usize, to: usize) {
        if from < to && to <= chunk.len() {
            self.queue.push_back(SseItem::Raw(chunk.slice(from..to)));
        }
    }

    fn has_needle(&self, haystack: &[u8]) -> bool {
        self.finders.iter().any(|finder| finder.find(haystack).is_some())
    }

    /// Whether `chunk[start..end]` contains a needle. `needle_at` caches the
    /// earliest needle start found from an earlier block start onward, so in
    /// the common needle-free case each finder scans the chunk only once.
    fn block_has_needle(
        &self,
        chunk: &[u8],
        start: usize,
        end: usize,
        needle_at: &mut Option<usize>,
    ) -> bool {
        if self.finders.is_empty() {
            return false;
        }
        let next = match *needle_at {
            Some(at) => at,
            None => {
                let rest = chunk.get(start..).unwrap_or_default();
                let at = self
                    .finders
                    .iter()
                    .filter_map(|finder| finder.find(rest))
                    .min()
                    .map_or(chunk.len(), |i| start + i);
                *needle_at = Some(at);
                at
            }
        };
        // No needle starts anywhere before `end` (from the earlier start on).
        if next >= end {
            return false;
        }
        // One starts before `end`, but it may run past the block: check
        // exactly, and rescan from the next block onward.
        *needle_at = None;
        chunk.get(start..end).is_some_and(|block| self.has_needle(block))
    }
}

impl CandidateEvent {
    /// The block's bytes exactly as received.
    #[cfg(test)]
    pub(crate) fn raw(&self) -> &Bytes {
        &self.raw
    }

    pub(crate) fn into_raw(self) -> Bytes {
        self.raw
    }

    /// False for a tail cut off by the end of the stream before its blank
    /// line; a client would discard such an event.
    #[cfg(test)]
    pub(crate) fn is_terminated(&self) -> bool {
        self.terminated
    }

    /// The event's data: every `data` field value joined with LF, or `None`
    /// without a `data` field. Borrowed when there is a single data line, the
    /// usual shape of a JSON-RPC message. Bytes are returned as received; the
    /// caller decides about UTF-8 when it parses the JSON.
    pub(crate) fn data(&self) -> Option<Cow<'_, [u8]>> {
        let mut data: Option<Cow<'_, [u8]>> = None;
        for (content, _) in Lines::new(&self.raw) {
            if content.is_empty() {
                break;
            }
            let Some(value) = data_value(content) else {
                continue;
            };
            data = Some(match data {
                None => Cow::Borrowed(value),
                Some(joined) => {
                    let mut joined = joined.into_owned();
                    joined.push(b'\n');
                    joined.extend_from_slice(value);
                    Cow::Owned(joined)
                }
            });
        }
        data
    }

    /// Re-encodes the block with its data replaced by `new_data`.
    ///
    /// Every other line (comments, `id`, `event`, `retry`, unknown fields) and
    /// the dispatching blank line are copied byte for byte and in order; the
    /// data lines become one `data: <new_data>` line at the first data line's
    /// place, with that line's terminator. Without a data line, the new line
    /// goes just before the blank line (with its terminator), or at the end of
    /// an unterminated block.
    ///
    /// One byte may be added: if dropping data lines brings a line that ends
    /// in a lone CR right before a line starting with LF, the two would merge
    /// into one CRLF and swallow a line, so an LF is added after that CR.
    pub(crate) fn with_data(&self, new_data: &[u8]) -> Result<Bytes, DataHasLineBreak> {
        if memchr2(b'\r', b'\n', new_data).is_some() {
            return Err(DataHasLineBreak);
        }
        let mut out = BytesMut::with_capacity(self.raw.len() + new_data.len() + 8);
        let mut written = false;
        for (content, term) in Lines::new(&self.raw) {
            let is_data = data_value(content).is_some();
            if !written && (is_data || content.is_empty()) {
                push_data_line(&mut out, new_data, term);
                written = true;
            }
            if !is_data {
                push_line(&mut out, content, term);
            }
        }
        if !written {
            if !matches!(out.last(), Some(b'\n' | b'\r') | None) {
                out.put_u8(b'\n');
            }
            push_data_line(&mut out, new_data, b"\n");
        }
        Ok(out.freeze())
    }
}

/// The value of a `data` field line, per the spec's field rules: split at the
/// first colon (none: the whole line is the name), drop one leading space.
fn data_value(line: &[u8]) -> Option<&[u8]> {
    let (name, value) = match memchr(b':', line) {
        Some(colon) => (
            line.get(..colon).unwrap_or_default(),
            line.get(colon + 1..).unwrap_or_default(),
        ),
        None => (line, &b""[..]),
    };
    (name == b"data").then(|| value.strip_prefix(b" ").unwrap_or(value))
}

/// `bytes[from..to]`; callers pass in-bounds offsets, this just keeps a bad one
/// from becoming a panic.
fn span(bytes: &[u8], from: usize, to: usize) -> &[u8] {
    bytes.get(from..to).unwrap_or_default()
}

fn push_data_line(out: &mut BytesMut, data: &[u8], term: &[u8]) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data);
    out.extend_from_slice(term);
}

fn push_line(out: &mut BytesMut, content: &[u8], term: &[u8]) {
    let first = content.first().or(term.first());
    if out.last() == Some(&b'\r') && first == Some(&b'\n') {
        out.put_u8(b'\n');
    }
    out.extend_from_slice(content);
    out.extend_from_slice(term);
}

/// Lines of one block as `(content, terminator)`; the terminator is empty
/// only for an unterminated last line.
struct Lines<'a> {
    rest: &'a [u8],
}

impl<'a> Lines<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }
}

impl<'a> Iterator for Lines<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let Some(i) = memchr2(b'\r', b'\n', self.rest) else {
            let line = std::mem::take(&mut self.rest);
            return Some((line, &[]));
        };
        let crlf = self.rest.get(i..i + 2) == Some(b"\r\n");
        let (content, rest) = self.rest.split_at(i);
        let (term, rest) = rest.split_at(if crlf { 2 } else { 1 });
        self.rest = rest;
        Some((content, term))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::task::{Context, Poll, Waker};

    const NEEDLE: &[u8] = b"NEEDLE";

    fn framer(max: usize, needles: &[&[u8]]) -> SseFramer {
        SseFramer::new(max, needles.iter().map(|n| n.to_vec()).collect())
    }

    /// Runs a whole body through a framer: the items, and on overflow the
    /// unframed bytes plus the index of the first chunk not pushed.
    struct Run {
        items: Vec<SseItem>,
        overflow: Option<(Vec<u8>, usize)>,
    }

    fn run_with(mut f: SseFramer, chunks: &[Bytes]) -> Run {
        let mut items = Vec::new();
        for (i, chunk) in chunks.iter().enumerate() {
            let pushed = f.push(chunk.clone());
            while let Some(item) = f.next_item() {
                items.push(item);
            }
            if pushed.is_err() {
                assert!(f.is_poisoned());
                assert!(f.push(Bytes::from_static(b"more")).is_err());
                assert_eq!(f.finish(), None);
                let unframed = f.take_unframed().concat();
                return Run {
                    items,
                    overflow: Some((unframed, i + 1)),
                };
            }
        }
        if let Some(item) = f.finish() {
            items.push(item);
        }
        while let Some(item) = f.next_item() {
            items.push(item);
        }
        Run {
            items,
            overflow: None,
        }
    }

    fn run(chunks: &[&[u8]], needles: &[&[u8]]) -> Vec<SseItem> {
        let chunks: Vec<Bytes> = chunks.iter().map(|c| Bytes::copy_from_slice(c)).collect();
        let r = run_with(framer(usize::MAX, needles), &chunks);
        assert!(r.overflow.is_none());
        r.items
    }

    fn concat(items: &[SseItem]) -> Vec<u8> {
        items.iter().flat_map(|i| i.raw().to_vec()).collect()
    }

    fn candidates(items: &[SseItem]) -> Vec<CandidateEvent> {
        items
            .iter()
            .filter_map(|i| match i {
                SseItem::Candidate(c) => Some(c.clone()),
                SseItem::Raw(_) => None,
            })
            .collect()
    }

    fn raw(bytes: &[u8]) -> SseItem {
        SseItem::Raw(Bytes::copy_from_slice(bytes))
    }

    fn cand(bytes: &[u8], terminated: bool) -> SseItem {
        SseItem::Candidate(CandidateEvent {
            raw: Bytes::copy_from_slice(bytes),
            terminated,
        })
    }

    fn single(bytes: &[u8]) -> CandidateEvent {
        let items = run(&[bytes], &[b""]);
        match items.as_slice() {
            [SseItem::Candidate(c)] => c.clone(),
            other => panic!("expected one candidate, got {other:?}"),
        }
    }

    /// Every split of `input` into two and three chunks gives the same items
    /// modulo raw coalescing, and the expected candidates.
    fn check_all_splits(input: &[u8], needles: &[&[u8]], expected: &[SseItem]) {
        let whole = run(&[input], needles);
        assert_eq!(concat(&whole), input);
        assert_eq!(candidates(&whole), candidates(expected), "whole input");
        for a in 0..=input.len() {
            for b in a..=input.len() {
                let items = run(&[&input[..a], &input[a..b], &input[b..]], needles);
                assert_eq!(concat(&items), input, "split at {a},{b}");
                assert_eq!(candidates(&items), candidates(expected), "split at {a},{b}");
            }
        }
    }

    #[test]
    fn line_end_styles() {
        for eol in ["\n", "\r\n", "\r"] {
            let ev = format!("id: 1{eol}data: NEEDLE{eol}{eol}");
            let input = format!(":ka{eol}{eol}{ev}event: x{eol}data: y{eol}{eol}");
            check_all_splits(input.as_bytes(), &[NEEDLE], &[cand(ev.as_bytes(), true)]);
            let c = single(ev.as_bytes());
            assert_eq!(c.data().as_deref(), Some(&b"NEEDLE"[..]));
        }
        // Mixed within one event.
        let ev = b"id: 1\rdata: a\r\ndata: NEEDLE\nretry: 5\r\r\n";
        check_all_splits(ev, &[NEEDLE], &[cand(ev, true)]);
        assert_eq!(single(ev).data().as_deref(), Some(&b"a\nNEEDLE"[..]));
    }

    #[test]
    fn coalesces_in_chunk_raw_zero_copy() {
        let chunk =
            Bytes::from_static(b": ping\n\nid: 1\ndata: a\n\n\n\nevent: e\ndata: NEEDLE\n\ndata: b\n\n");
        let mut f = framer(1024, &[NEEDLE]);
        f.push(chunk.clone()).unwrap();
        let mut items = Vec::new();
        while let Some(i) = f.next_item() {
            items.push(i);
        }
        assert_eq!(f.finish(), None);
        assert_eq!(
            items,
            vec![
                raw(b": ping\n\nid: 1\ndata: a\n\n\n\n"),
                cand(b"event: e\ndata: NEEDLE\n\n", true),
                raw(b"data: b\n\n"),
            ]
        );
        let range = chunk.as_ptr_range();
        for item in &items {
            assert!(range.contains(&item.raw().as_ptr()), "not a slice of the chunk");
        }
    }

    #[test]
    fn crlf_split_inside_event() {
        let items = run(
            &[b"data: NEEDLE\r", b"\nid: 2\r", b"\n\r", b"\n", b"x"],
            &[NEEDLE],
        );
        assert_eq!(
            items,
            vec![cand(b"data: NEEDLE\r\nid: 2\r\n\r\n", true), raw(b"x")]
        );
    }

    #[test]
    fn candidate_ending_in_cr_is_held_for_the_lf() {
        // LF follows in the next chunk: it belongs to the candidate.
        let items = run(&[b"data: NEEDLE\r\r", b"\ndata: z\n\n"], &[NEEDLE]);
        assert_eq!(
            items,
            vec![cand(b"data: NEEDLE\r\r\n", true), raw(b"data: z\n\n")]
        );
        // Something else follows: released before it.
        let items = run(&[b"data: NEEDLE\r\r", b"", b":x\n"], &[NEEDLE]);
        assert_eq!(items, vec![cand(b"data: NEEDLE\r\r", true), raw(b":x\n")]);
        // End of stream: released, terminated, by finish().
        let mut f = framer(100, &[NEEDLE]);
        f.push(Bytes::from_static(b"data: NEEDLE\r\r")).unwrap();
        assert_eq!(f.next_item(), None);
        assert_eq!(f.finish(), Some(cand(b"data: NEEDLE\r\r", true)));
        assert_eq!(f.next_item(), None);
    }

    #[test]
    fn non_candidate_ending_in_cr_is_not_delayed() {
        let mut f = framer(100, &[NEEDLE]);
        f.push(Bytes::from_static(b":keepalive\r\r")).unwrap();
        assert_eq!(f.next_item(), Some(raw(b":keepalive\r\r")));
        // The LF completing that CRLF is forwarded alone, not as a blank line.
        f.push(Bytes::from_static(b"\ndata: NEEDLE\n\n")).unwrap();
        assert_eq!(f.next_item(), Some(raw(b"\n")));
        assert_eq!(f.next_item(), Some(cand(b"data: NEEDLE\n\n", true)));
        assert_eq!(f.next_item(), None);
        // Same when the block was buffered across chunks.
        let items = run(&[b":a", b"b\r\r", b"\n\n"], &[NEEDLE]);
        assert_eq!(items, vec![raw(b":ab\r\r"), raw(b"\n\n")]);
    }

    #[test]
    fn data_field_rules() {
        let c = single(b"data:a\ndata:  b\ndata\ndata: \n: data: no\ndatax: no\nData: no\n\n");
        assert_eq!(c.data().as_deref(), Some(&b"a\n b\n\n"[..]));
        assert!(matches!(
            single(b"data: one\n\n").data(),
            Some(Cow::Borrowed(b"one"))
        ));
        assert_eq!(single(b"data\n\n").data().as_deref(), Some(&b""[..]));
        assert_eq!(single(b"data:\n\n").data().as_deref(), Some(&b""[..]));
        assert_eq!(single(b"id: data\n\n").data(), None);
        // Not valid UTF-8: returned as is.
        assert_eq!(
            single(b"data: \xff\xfe\n\n").data().as_deref(),
            Some(&b"\xff\xfe"[..])
        );
    }

    #[test]
    fn comment_with_needle_is_candidate_without_data() {
        let items = run(&[b": NEEDLE\n\n: other\n\n"], &[NEEDLE]);
        assert_eq!(items, vec![cand(b": NEEDLE\n\n", true), raw(b": other\n\n")]);
        assert_eq!(candidates(&items)[0].data(), None);
    }

    #[test]
    fn with_data_keeps_other_lines() {
        let c =
            single(b": c1\r\nid: 7\revent: ev\ndata: a\r\nfoo: bar\nretry: 10\ndata: b\n: c2\nbare\r\n\r\n");
        assert_eq!(
            &c.with_data(br#"{"x":1}"#).unwrap()[..],
            &b": c1\r\nid: 7\revent: ev\ndata: {\"x\":1}\r\nfoo: bar\nretry: 10\n: c2\nbare\r\n\r\n"[..]
        );
        assert_eq!(c.with_data(b"a\nb"), Err(DataHasLineBreak));
        assert_eq!(c.with_data(b"a\rb"), Err(DataHasLineBreak));
        // No data line: inserted before the blank line, with its terminator.
        assert_eq!(
            &single(b"id: 1\n\r\n").with_data(b"x").unwrap()[..],
            b"id: 1\ndata: x\r\n\r\n"
        );
        // Unterminated: the data line keeps the (absent) terminator.
        let items = run(&[b"id: 1\ndata: NEEDLE"], &[NEEDLE]);
        let c = &candidates(&items)[0];
        assert!(!c.is_terminated());
        assert_eq!(&c.with_data(b"y").unwrap()[..], b"id: 1\ndata: y");
        let items = run(&[b"id: NEEDLE"], &[NEEDLE]);
        assert_eq!(
            &candidates(&items)[0].with_data(b"y").unwrap()[..],
            b"id: NEEDLE\ndata: y\n"
        );
    }

    #[test]
    fn with_data_does_not_merge_cr_with_following_lf() {
        // Dropping the second data line would put "id: 1\r" before the
        // LF blank line: CR LF would then be one line end and the event would
        // never be dispatched.
        let c = single(b"data: a\nid: 1\rdata: b\n\n");
        let out = c.with_data(b"x").unwrap();
        assert_eq!(&out[..], b"data: x\nid: 1\r\n\n");
        assert_eq!(oracle(&[out])[0].data.as_deref(), Some("x"));
    }

    #[test]
    fn empty_chunks_change_nothing() {
        let items = run(
            &[
                b"",
                b"data: NE",
                b"",
                b"",
                b"EDLE\r",
                b"",
                b"\n",
                b"\r",
                b"",
                b"\n",
                b"",
            ],
            &[NEEDLE],
        );
        assert_eq!(items, vec![cand(b"data: NEEDLE\r\n\r\n", true)]);
    }

    #[test]
    fn unterminated_tail() {
        let items = run(&[b"data: a\n\nid: 1\ndata: x"], &[NEEDLE]);
        assert_eq!(items, vec![raw(b"data: a\n\n"), raw(b"id: 1\ndata: x")]);
        let items = run(&[b"data: a\n\n", b"data: NEED", b"LE\n"], &[NEEDLE]);
        assert_eq!(items, vec![raw(b"data: a\n\n"), cand(b"data: NEEDLE\n", false)]);
        assert_eq!(candidates(&items)[0].data().as_deref(), Some(&b"NEEDLE"[..]));
        // A final lone CR ends the line; still no blank line.
        let items = run(&[b"data: NEEDLE\r"], &[NEEDLE]);
        assert_eq!(items, vec![cand(b"data: NEEDLE\r", false)]);
    }

    #[test]
    fn needle_split_across_chunks_and_across_blocks() {
        let items = run(&[b"data: NEE", b"DLE\n", b"\n"], &[NEEDLE]);
        assert_eq!(items, vec![cand(b"data: NEEDLE\n\n", true)]);
        // A needle spanning two blocks is in neither.
        let items = run(&[b"data: a\n\ndata: b\n\n"], &[b"a\n\nd"]);
        assert!(candidates(&items).is_empty());
        // A needle may contain line-end bytes; the dispatching blank line's
        // own line end is never searched, however the CRLF is split.
        for chunks in [&[&b"t\r\r\n"[..]][..], &[b"t\r\r", b"\n"]] {
            let items = run(chunks, &[b"\r\n"]);
            assert!(candidates(&items).is_empty(), "{chunks:?}");
        }
        let items = run(&[b"t\r\nu\n\n"], &[b"\r\n"]);
        assert_eq!(items, vec![cand(b"t\r\nu\n\n", true)]);
        // Several needles; the first one found may run past its block.
        let input = b"data: xNEE\n\ndata: yy\n\ndata: NEEDLE\n\n";
        let items = run(&[input], &[NEEDLE, b"yy"]);
        assert_eq!(
            items,
            vec![
                raw(b"data: xNEE\n\n"),
                cand(b"data: yy\n\n", true),
                cand(b"data: NEEDLE\n\n", true)
            ]
        );
    }

    #[test]
    fn no_needles_is_pass_through() {
        let items = run(&[b"data: NEEDLE\n\n", b"data: x"], &[]);
        assert!(candidates(&items).is_empty());
        assert_eq!(concat(&items), b"data: NEEDLE\n\ndata: x");
    }

    #[test]
    fn size_cap() {
        // 13 bytes of lines; the blank line is not counted.
        let ev: &[u8] = b"data: NEEDLE\n\r\n";
        for needles in [&[NEEDLE][..], &[]] {
            let items = run_with(framer(13, needles), &[Bytes::from_static(ev)]);
            assert!(items.overflow.is_none());
            let r = run_with(
                framer(12, needles),
                &[Bytes::from_static(b": ok\n\n"), Bytes::from_static(ev)],
            );
            assert_eq!(r.items, vec![raw(b": ok\n\n")]);
            assert_eq!(r.overflow, Some((ev.to_vec(), 2)));
        }
        // Detected while buffering, before the event completes.
        let mut f = framer(8, &[NEEDLE]);
        f.push(Bytes::from_static(b": a\n\ndata")).unwrap();
        let err = f.push(Bytes::from_static(b": 12345")).unwrap_err();
        assert_eq!(err, EventTooLarge { limit: 8 });
        assert_eq!(err.to_string(), "SSE event larger than the 8 byte limit");
        assert_eq!(f.next_item(), Some(raw(b": a\n\n")));
        assert_eq!(f.next_item(), None);
        assert_eq!(f.take_unframed().concat(), b"data: 12345");
        assert!(f.push(Bytes::new()).is_err());
        // The rest of the overflowing chunk is returned too.
        let r = run_with(framer(4, &[]), &[Bytes::from_static(b"a\n\nlong line\n\nb\n\n")]);
        assert_eq!(r.items, vec![raw(b"a\n\n")]);
        assert_eq!(r.overflow, Some((b"long line\n\nb\n\n".to_vec(), 1)));
        // Blank lines are free.
        let r = run_with(framer(0, &[]), &[Bytes::from_static(b"\n\r\n\r\r")]);
        assert_eq!(concat(&r.items), b"\n\r\n\r\r");
    }

    #[test]
    fn bom() {
        let input = b"\xEF\xBB\xBFdata: NEEDLE\n\n";
        check_all_splits(input, &[NEEDLE], &[cand(b"data: NEEDLE\n\n", true)]);
        let items = run(&[b"\xEF", b"\xBB", b"\xBF:c\n\n"], &[NEEDLE]);
        assert_eq!(items, vec![raw(b"\xEF\xBB\xBF"), raw(b":c\n\n")]);
        // BOM then a blank line: an empty dispatch, as for a parser.
        let items = run(&[b"\xEF\xBB\xBF\ndata: NEEDLE\n\n"], &[NEEDLE]);
        assert_eq!(candidates(&items), candidates(&[cand(b"data: NEEDLE\n\n", true)]));
        // A broken BOM is line content.
        let items = run(&[b"\xEF\xBB", b"data: NEEDLE\n\n"], &[NEEDLE]);
        assert_eq!(items, vec![cand(b"\xEF\xBBdata: NEEDLE\n\n", true)]);
        let items = run(&[b"\xEF"], &[NEEDLE]);
        assert_eq!(items, vec![raw(b"\xEF")]);
        // Only the first one is special.
        let items = run(&[b"\xEF\xBB\xBF\xEF\xBB\xBFdata: NEEDLE\n\n"], &[NEEDLE]);
        assert_eq!(candidates(&items)[0].data(), None);
    }

    // ---- property tests -------------------------------------------------

    /// Decodes with the `sse-stream` crate, the independent oracle.
    fn oracle(chunks: &[Bytes]) -> Vec<sse_stream::Sse> {
        use futures_util::StreamExt;
        let input = futures_util::stream::iter(chunks.iter().cloned().map(Ok::<_, std::io::Error>));
        let mut stream = sse_stream::SseByteStream::new(input);
        let mut cx = Context::from_waker(Waker::noop());
        let mut out = Vec::new();
        loop {
            match stream.poll_next_unpin(&mut cx) {
                Poll::Ready(Some(Ok(event))) => out.push(event),
                Poll::Ready(Some(Err(e))) => panic!("oracle error: {e}"),
                Poll::Ready(None) => return out,
                Poll::Pending => unreachable!("in-memory stream"),
            }
        }
    }

    /// Non-incremental reference framing: the whole input split into lines,
    /// grouped at blank lines. Returns the candidates.
    fn reference(input: &[u8], needles: &[&[u8]]) -> Vec<CandidateEvent> {
        let has = |b: &[u8]| needles.iter().any(|n| memchr::memmem::find(b, n).is_some());
        let body = input.strip_prefix(BOM).unwrap_or(input);
        let mut out = Vec::new();
        let mut cur = Vec::new();
        for (content, term) in Lines::new(body) {
            if content.is_empty() {
                // The dispatching line end is not searched.
                let candidate = !cur.is_empty() && has(&cur);
                cur.extend_from_slice(term);
                if candidate {
                    out.push(CandidateEvent {
                        raw: cur.clone().into(),
                        terminated: true,
                    });
                }
                cur.clear();
            } else {
                cur.extend_from_slice(content);
                cur.extend_from_slice(term);
            }
        }
        if !cur.is_empty() && has(&cur) {
            out.push(CandidateEvent {
                raw: cur.into(),
                terminated: false,
            });
        }
        out
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => "[a-z0-9 :{}\",é€😀]{0,12}",
            1 => Just("NEEDLE".to_string()),
            1 => "[a-z]{0,3}NEEDLE[a-z ]{0,3}",
        ]
    }

    fn line() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => text().prop_map(|t| format!("data: {t}")),
            1 => text().prop_map(|t| format!("data:{t}")),
            1 => text().prop_map(|t| format!("data:  {t}")),
            1 => Just("data".to_string()),
            2 => text().prop_map(|t| format!(":{t}")),
            1 => text().prop_map(|t| format!("id: {t}")),
            1 => text().prop_map(|t| format!("event:{t}")),
            1 => "[0-9]{1,6}".prop_map(|t| format!("retry: {t}")),
            1 => text().prop_map(|t| format!("retry:{t}")),
            1 => text().prop_map(|t| format!("foo: {t}")),
            1 => prop::sample::select(vec!["bare", "Data: x", "data : x", "dat: a", "datax: y", ": data: z"])
                .prop_map(String::from),
        ]
    }

    fn eol() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec!["\n", "\r\n", "\r"])
    }

    /// A realistic stream: optional BOM, events (each lines + blank line,
    /// random line ends), optional unterminated tail.
    fn stream() -> impl Strategy<Value = Vec<u8>> {
        let event = (prop::collection::vec((line(), eol()), 0..6), eol());
        let tail = (
            prop::collection::vec((line(), eol()), 0..3),
            prop::option::of(line()),
        );
        (
            any::<bool>(),
            prop::collection::vec(event, 0..8),
            prop::option::of(tail),
        )
            .prop_map(|(bom, events, tail)| {
                let mut s = String::new();
                if bom {
                    s.push('\u{FEFF}');
                }
                for (lines, end) in events {
                    for (l, e) in lines {
                        s.push_str(&l);
                        s.push_str(e);
                    }
                    s.push_str(end);
                }
                if let Some((lines, last)) = tail {
                    for (l, e) in lines {
                        s.push_str(&l);
                        s.push_str(e);
                    }
                    s.push_str(last.as_deref().unwrap_or(""));
                }
                s.into_bytes()
            })
    }

    /// Bytes biased towards what matters to the framer.
    fn noise() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            3 => prop::sample::select(b"\r\n:".to_vec()),
            3 => prop::sample::select(b"data ".to_vec()),
            1 => prop::sample::select(BOM.to_vec()),
            2 => any::<u8>(),
        ];
        prop::collection::vec(byte, 0..300)
    }

    fn chunk_sizes() -> impl Strategy<Value = Vec<usize>> {
        prop::collection::vec(0usize..12, 1..40)
    }

    fn chunkings(input: &[u8], sizes: &[usize]) -> Vec<Vec<Bytes>> {
        let all = Bytes::copy_from_slice(input);
        let whole = vec![all.clone()];
        // One byte per chunk, with empty chunks interleaved.
        let bytewise: Vec<Bytes> = (0..all.len())
            .flat_map(|i| [Bytes::new(), all.slice(i..i + 1)])
            .chain([Bytes::new()])
            .collect();
        let mut random = Vec::new();
        if sizes.iter().any(|&s| s > 0) {
            let (mut at, mut k) = (0, 0);
            while at < all.len() {
                let n = sizes[k % sizes.len()].min(all.len() - at);
                random.push(all.slice(at..at + n));
                at += n;
                k += 1;
            }
        } else {
            random.push(all.clone());
        }
        vec![whole, bytewise, random]
    }

    /// Byte identity and chunking independence, checked against the reference.
    fn check_framing(input: &[u8], sizes: &[usize], needles: &[&[u8]]) -> Result<(), TestCaseError> {
        let expected = reference(input, needles);
        for chunks in chunkings(input, sizes) {
            let r = run_with(framer(usize::MAX, needles), &chunks);
            prop_assert!(r.overflow.is_none());
            prop_assert_eq!(concat(&r.items), input);
            prop_assert_eq!(&candidates(&r.items), &expected);
            for c in candidates(&r.items) {
                // Parsing never panics on whatever bytes the event holds.
                let _ = c.data();
                let _ = c.with_data(b"{}");
            }
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn prop_byte_identity_realistic(input in stream(), sizes in chunk_sizes()) {
            check_framing(&input, &sizes, &[NEEDLE])?;
        }

        #[test]
        fn prop_byte_identity_noise(input in noise(), sizes in chunk_sizes()) {
            check_framing(&input, &sizes, &[b"ta"])?;
            check_framing(&input, &sizes, &[b"\r\n", b"a"])?;
        }

        /// data() agrees with sse-stream on every dispatched event with data.
        #[test]
        fn prop_data_matches_oracle(input in stream(), sizes in chunk_sizes()) {
            let expected: Vec<String> = oracle(&[Bytes::copy_from_slice(&input)])
                .into_iter()
                .filter_map(|e| e.data)
                .collect();
            for chunks in chunkings(&input, &sizes) {
                // Every event with a data field contains "data".
                let r = run_with(framer(usize::MAX, &[b"data"]), &chunks);
                let ours: Vec<String> = candidates(&r.items)
                    .iter()
                    .filter(|c| c.is_terminated())
                    .filter_map(|c| c.data())
                    .map(|d| String::from_utf8(d.into_owned()).unwrap())
                    .collect();
                prop_assert_eq!(&ours, &expected);
            }
        }

        /// with_data() output decodes to the new data and the same metadata,
        /// keeps every non-data line, and frames as exactly one event.
        #[test]
        fn prop_with_data(input in stream(), new in "[a-z0-9{}\":,é ]{0,20}") {
            let items = run(&[&input], &[b"data"]);
            for c in candidates(&items) {
                if !c.is_terminated() || c.data().is_none() {
                    continue;
                }
                let out = c.with_data(new.as_bytes()).unwrap();
                let before = oracle(&[c.raw().clone()]);
                let after = oracle(std::slice::from_ref(&out));
                prop_assert_eq!(before.len(), 1);
                prop_assert_eq!(after.len(), 1);
                prop_assert_eq!(after[0].data.as_deref(), Some(new.as_str()));
                prop_assert_eq!(&after[0].id, &before[0].id);
                prop_assert_eq!(&after[0].event, &before[0].event);
                prop_assert_eq!(after[0].retry, before[0].retry);

                let kept = |b: &[u8]| -> Vec<Vec<u8>> {
                    Lines::new(b).filter(|(l, _)| data_value(l).is_none()).map(|(l, _)| l.to_vec()).collect()
                };
                prop_assert_eq!(kept(&out), kept(c.raw()));
                prop_assert_eq!(Lines::new(&out).filter(|(l, _)| data_value(l).is_some()).count(), 1);
                prop_assert_eq!(run(&[&out], &[b"data"]), vec![SseItem::Candidate(CandidateEvent { raw: out.clone(), terminated: true })]);
            }
        }

        /// With a cap: the same outcome for every chunking, and no byte lost.
        #[test]
        fn prop_cap(input in stream(), sizes in chunk_sizes(), max in 0usize..60) {
            let mut first: Option<(Vec<u8>, Vec<CandidateEvent>, bool)> = None;
            for chunks in chunkings(&input, &sizes) {
                let r = run_with(framer(max, &[NEEDLE]), &chunks);
                let emitted = concat(&r.items);
                let mut all = emitted.clone();
                if let Some((unframed, next)) = &r.overflow {
                    all.extend_from_slice(unframed);
                    for c in &chunks[*next..] {
                        all.extend_from_slice(c);
                    }
                }
                prop_assert_eq!(&all, &input);
                let outcome = (emitted, candidates(&r.items), r.overflow.is_some());
                match &first {
                    None => first = Some(outcome),
                    Some(f) => prop_assert_eq!(f, &outcome),
                }
            }
        }
    }
}
