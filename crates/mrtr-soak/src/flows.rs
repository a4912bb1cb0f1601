//! The flows a simulated user runs, one after another, and how a user retries.
//!
//! | flow | backend | exchanges |
//! |---|---|---|
//! | `delete_branch` | alpha (SSE) | an MRTR round (confirm), then the result |
//! | `deploy` | alpha | two MRTR rounds (confirm, change ticket), then the result |
//! | `provision_cluster` | alpha | three MRTR rounds (region, node count, approval), then the result |
//! | `whoami` | alpha | one plain call |
//! | `greet` | beta (JSON) | one plain call |
//! | `tools/list` | both | one merged list, which must hold both backends' tools |
//! | `task_after_round` | beta | an MRTR round (`test_tool_with_task`), a task, `tasks/get` until completed |
//! | `task_with_input` | beta | a task (`confirm_delete`), `tasks/get` until it asks, `tasks/update`, `tasks/get` until completed |
//!
//! Every answer is checked: the final text names the arguments and answers of this very flow
//! (so an answer meant for another flow, or from the wrong backend, is caught), a `requestState`
//! and a task id reach the client only as `mrtr…` envelopes, and a task answers with the handle
//! the client used.
//!
//! **Retries**, as a real client does them: an attempt that failed because a process was down
//! ([`Cause::retryable`]) is repeated, with a new JSON-RPC id, after a backoff that doubles
//! (`backoff`, `2 × backoff`, `4 × backoff`, each plus up to 10 % jitter), at most three times.
//! A round that still fails, or a failure that is not retryable (an envelope refused, a wrong
//! answer), loses the flow. The users think (sleep up to `think`) between rounds, as a person
//! answering an elicitation does, and pause (up to `pause`) between flows; a long think with a
//! short pause holds many flows open at a modest request rate.
//!
//! ```
//! use mrtr_soak::flows::Flow;
//!
//! assert_eq!(Flow::ProvisionCluster.backend(), "alpha");
//! assert_eq!(Flow::pick(0), Flow::ALL[0]);
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::client::{Cause, Connection, Failure, Reply};
use crate::mcp::Call;
use crate::stats::{Clock, ErrorRecord, Lost, Stats};

/// Retries after the first attempt.
pub const MAX_RETRIES: u32 = 3;

/// How often a task is polled (the task fixture's suggested interval).
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Polls after which a task that has not reached the wanted state loses its flow.
const MAX_POLLS: usize = 300;

/// The kinds of flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flow {
    /// One MRTR round.
    DeleteBranch,
    /// Two MRTR rounds.
    Deploy,
    /// Three MRTR rounds.
    ProvisionCluster,
    /// A plain call to alpha.
    WhoAmI,
    /// A plain call to beta.
    Greet,
    /// The merged list.
    ListTools,
    /// An MRTR round, then a task.
    TaskAfterRound,
    /// A task that asks for input.
    TaskWithInput,
}

impl Flow {
    /// Every flow, in report order.
    pub const ALL: [Flow; 8] = [
        Flow::DeleteBranch,
        Flow::Deploy,
        Flow::ProvisionCluster,
        Flow::WhoAmI,
        Flow::Greet,
        Flow::ListTools,
        Flow::TaskAfterRound,
        Flow::TaskWithInput,
    ];

    /// Relative frequency in the mix.
    fn weight(self) -> u64 {
        match self {
            Flow::DeleteBranch | Flow::Deploy | Flow::ProvisionCluster => 12,
            Flow::WhoAmI | Flow::Greet | Flow::TaskAfterRound | Flow::TaskWithInput => 10,
            Flow::ListTools => 4,
        }
    }

    /// The flow for a random number (weighted).
    pub fn pick(random: u64) -> Flow {
        let total: u64 = Flow::ALL.iter().map(|f| f.weight()).sum();
        let mut point = random % total;
        for flow in Flow::ALL {
            if point < flow.weight() {
                return flow;
            }
            point -= flow.weight();
        }
        unreachable!("point < total")
    }

    /// The name in reports.
    pub fn label(self) -> &'static str {
        match self {
            Flow::DeleteBranch => "delete_branch",
            Flow::Deploy => "deploy",
            Flow::ProvisionCluster => "provision_cluster",
            Flow::WhoAmI => "whoami",
            Flow::Greet => "greet",
            Flow::ListTools => "tools/list",
            Flow::TaskAfterRound => "task_after_round",
            Flow::TaskWithInput => "task_with_input",
        }
    }

    /// The backend the flow's requests are for.
    pub fn backend(self) -> &'static str {
        match self {
            Flow::DeleteBranch | Flow::Deploy | Flow::ProvisionCluster | Flow::WhoAmI => "alpha",
            Flow::Greet | Flow::TaskAfterRound | Flow::TaskWithInput => "beta",
            Flow::ListTools => "both",
        }
    }
}

/// How every user behaves.
#[derive(Clone, Copy, Debug)]
pub struct Behaviour {
    /// The load balancer.
    pub target: SocketAddr,
    /// Longest think time between rounds (uniformly random up to it).
    pub think: Duration,
    /// Longest pause between flows (uniformly random up to it).
    pub pause: Duration,
    /// First retry's backoff.
    pub backoff: Duration,
    /// Longest wait for one answer.
    pub request_timeout: Duration,
}

/// One simulated user: one connection, one flow at a time.
#[derive(Debug)]
pub struct User {
    behaviour: Behaviour,
    connection: Connection,
    stats: Arc<Stats>,
    clock: Clock,
    random: u64,
    next_id: u64,
    /// Makes this flow's arguments and answers unique.
    seq: String,
    /// Replicas that answered this flow's exchanges.
    upstreams: Vec<String>,
}

/// The round labels of MRTR flows.
const ROUNDS: [&str; 4] = ["round 1", "round 2", "round 3", "round 4"];

impl User {
    /// User number `index`.
    pub fn new(index: usize, behaviour: Behaviour, stats: Arc<Stats>, clock: Clock) -> Self {
        Self {
            behaviour,
            connection: Connection::new(behaviour.target),
            stats,
            clock,
            random: 0x9e37_79b9_7f4a_7c15 ^ (index as u64).wrapping_mul(0x2545_f491_4f6c_dd1d),
            next_id: 1,
            seq: String::new(),
            upstreams: Vec::new(),
        }
        .warmed()
    }

    fn warmed(mut self) -> Self {
        for _ in 0..4 {
            self.next_random();
        }
        self
    }

    /// Runs flows until `deadline`; a flow in progress then runs to its end.
    pub async fn run_until(mut self, deadline: Instant) {
        let mut count = 0u64;
        while Instant::now() < deadline {
            let flow = Flow::pick(self.next_random());
            count += 1;
            self.seq = format!("{:x}-{count}", self.random & 0xffff_ffff);
            self.upstreams.clear();
            self.stats.flow_started(flow.label());
            let outcome = self.run(flow).await;
            if outcome.is_ok() && self.upstreams.len() >= 2 {
                self.stats
                    .multi_round_flows
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if self.upstreams.iter().any(|u| *u != self.upstreams[0]) {
                    self.stats
                        .crossed_flows
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            self.stats.flow_ended(flow.label(), outcome.err());
            self.sleep_up_to(self.behaviour.pause).await;
        }
    }

    async fn run(&mut self, flow: Flow) -> Result<(), Lost> {
        let seq = self.seq.clone();
        match flow {
            Flow::DeleteBranch => {
                let (repo, branch) = (format!("acme/r{seq}"), format!("b{seq}"));
                let expected = format!("[alpha] delete_branch: deleted branch {branch} in {repo}");
                self.mrtr(
                    flow,
                    "delete_branch",
                    json!({ "repo": repo, "branch": branch }),
                    1,
                    expected,
                )
                .await
            }
            Flow::Deploy => {
                let (service, environment) = (format!("svc{seq}"), "staging");
                let expected =
                    format!("[alpha] deploy: deployed {service} to {environment} under ticket CHG-{seq}");
                let arguments = json!({ "service": service, "environment": environment });
                self.mrtr(flow, "deploy", arguments, 2, expected).await
            }
            Flow::ProvisionCluster => {
                let name = format!("c{seq}");
                let expected = format!(
                    "[alpha] provision_cluster: provisioned {name} in r{seq} with {} nodes",
                    self.nodes()
                );
                self.mrtr(flow, "provision_cluster", json!({ "name": name }), 3, expected)
                    .await
            }
            Flow::WhoAmI => {
                let reply = self
                    .round(flow, "call", &Call::tool("whoami", json!({})), false)
                    .await?;
                self.expect_text(flow, "call", &reply.result, "[alpha] whoami: backend alpha")
            }
            Flow::Greet => {
                let name = format!("g{seq}");
                let call = Call::tool("greet", json!({ "name": name }));
                let reply = self.round(flow, "call", &call, false).await?;
                self.expect_text(flow, "call", &reply.result, &format!("Hello, {name}!"))
            }
            Flow::ListTools => self.list(flow).await,
            Flow::TaskAfterRound => self.task_after_round(flow).await,
            Flow::TaskWithInput => self.task_with_input(flow).await,
        }
    }

    /// `rounds` MRTR rounds of `tool`, then the result, which must be `expected`.
    async fn mrtr(
        &mut self,
        flow: Flow,
        tool: &str,
        arguments: Value,
        rounds: usize,
        expected: String,
    ) -> Result<(), Lost> {
        let mut call = Call::tool(tool, arguments.clone());
        for (round, step) in ROUNDS.into_iter().enumerate().take(rounds + 1) {
            let reply = self.round(flow, step, &call, round > 0).await?;
            if round == rounds {
                return self.expect_text(flow, step, &reply.result, &expected);
            }
            let (state, responses) = self.input_required(flow, step, &reply.result)?;
            call = Call::retry(tool, arguments.clone(), responses, &state);
            self.think().await;
        }
        unreachable!("the loop returns at its last round")
    }

    /// The `requestState` of an `input_required` result and the answers to its input requests.
    fn input_required(
        &self,
        flow: Flow,
        step: &'static str,
        result: &Value,
    ) -> Result<(String, Value), Lost> {
        let state = result["requestState"].as_str().filter(|s| s.starts_with("mrtr"));
        match (result["resultType"].as_str(), state) {
            (Some("input_required"), Some(state)) => Ok((
                state.to_owned(),
                self.answers(flow, step, &result["inputRequests"])?,
            )),
            _ => Err(self.wrong(
                flow,
                step,
                format!("expected input_required with an envelope: {result}"),
            )),
        }
    }

    /// This flow's answers to `requests`, accepted.
    fn answers(&self, flow: Flow, step: &'static str, requests: &Value) -> Result<Value, Lost> {
        let Some(requests) = requests.as_object().filter(|r| !r.is_empty()) else {
            return Err(self.wrong(flow, step, format!("no input requests: {requests}")));
        };
        let seq = &self.seq;
        let mut answers = serde_json::Map::new();
        for key in requests.keys() {
            let content = match key.as_str() {
                "confirm_delete" | "confirm_deploy" | "approve" | "confirm" => json!({ "confirm": true }),
                "change_ticket" => json!({ "ticket": format!("CHG-{seq}") }),
                "region" => json!({ "region": format!("r{seq}") }),
                "node_count" => json!({ "nodes": self.nodes() }),
                "user_name" => json!({ "name": format!("u{seq}") }),
                other => return Err(self.wrong(flow, step, format!("unexpected input request {other:?}"))),
            };
            answers.insert(key.clone(), json!({ "action": "accept", "content": content }));
        }
        Ok(Value::Object(answers))
    }

    fn nodes(&self) -> u64 {
        self.seq.len() as u64 % 100 + 1
    }

    async fn list(&mut self, flow: Flow) -> Result<(), Lost> {
        let reply = self.round(flow, "call", &Call::list_tools(), false).await?;
        let names: Vec<&str> = reply.result["tools"]
            .as_array()
            .map(|tools| tools.iter().filter_map(|t| t["name"].as_str()).collect())
            .unwrap_or_default();
        for (backend, tool) in [("alpha", "provision_cluster"), ("beta", "test_tool_with_task")] {
            if !names.contains(&tool) {
                let detail = format!("no {tool} in {names:?}");
                let mut record = self.record(flow, "call", self.clock.now(), Cause::PartialList, detail);
                record.backend = Some(backend.to_owned());
                record.upstream = reply.upstream.clone();
                self.stats.error(record.clone());
                return Err(record.into());
            }
        }
        Ok(())
    }

    async fn task_after_round(&mut self, flow: Flow) -> Result<(), Lost> {
        let tool = "test_tool_with_task";
        let first = self
            .round(flow, "round 1", &Call::tool(tool, json!({})), false)
            .await?;
        let (state, responses) = self.input_required(flow, "round 1", &first.result)?;
        self.think().await;
        let call = Call::retry(tool, json!({}), responses, &state);
        let second = self.round(flow, "round 2", &call, true).await?;
        let handle = self.task_handle(flow, "round 2", &second.result)?;
        let done = self.poll(flow, &handle, "completed").await?;
        let expected = format!("Hello, u{}! (from a task on beta)", self.seq);
        self.expect_text(flow, "tasks/get", &done["result"], &expected)
    }

    async fn task_with_input(&mut self, flow: Flow) -> Result<(), Lost> {
        let filename = format!("f{}.txt", self.seq);
        let call = Call::tool("confirm_delete", json!({ "filename": filename }));
        let created = self.round(flow, "call", &call, false).await?;
        let handle = self.task_handle(flow, "call", &created.result)?;
        let parked = self.poll(flow, &handle, "input_required").await?;
        let responses = self.answers(flow, "tasks/get", &parked["inputRequests"])?;
        self.think().await;
        let update = Call::task("tasks/update", &handle, json!({ "inputResponses": responses }));
        self.round(flow, "tasks/update", &update, true).await?;
        let done = self.poll(flow, &handle, "completed").await?;
        self.expect_text(
            flow,
            "tasks/get",
            &done["result"],
            &format!("{filename} deleted on beta"),
        )
    }

    /// The client's handle of a `task` result.
    fn task_handle(&self, flow: Flow, step: &'static str, result: &Value) -> Result<String, Lost> {
        match (result["resultType"].as_str(), result["taskId"].as_str()) {
            (Some("task"), Some(handle)) if handle.starts_with("mrtr") => Ok(handle.to_owned()),
            _ => Err(self.wrong(
                flow,
                step,
                format!("expected a task with a sealed handle: {result}"),
            )),
        }
    }

    /// `tasks/get` until the task is `wanted`; a terminal state other than that loses the flow.
    async fn poll(&mut self, flow: Flow, handle: &str, wanted: &str) -> Result<Value, Lost> {
        let call = Call::task("tasks/get", handle, json!({}));
        for _ in 0..MAX_POLLS {
            let reply = self.round(flow, "tasks/get", &call, true).await?;
            let task = reply.result;
            if task["taskId"].as_str() != Some(handle) {
                return Err(self.wrong(flow, "tasks/get", format!("answer names another task: {task}")));
            }
            match task["status"].as_str() {
                Some(status) if status == wanted => return Ok(task),
                Some("working" | "input_required") => tokio::time::sleep(POLL_INTERVAL).await,
                _ => {
                    return Err(self.wrong(flow, "tasks/get", format!("task not {wanted}: {task}")));
                }
            }
        }
        Err(self.wrong(
            flow,
            "tasks/get",
            format!("task not {wanted} after {MAX_POLLS} polls"),
        ))
    }

    fn expect_text(
        &self,
        flow: Flow,
        step: &'static str,
        result: &Value,
        expected: &str,
    ) -> Result<(), Lost> {
        let text = result["content"][0]["text"].as_str();
        if text == Some(expected) && result["isError"] != json!(true) {
            Ok(())
        } else {
            Err(self.wrong(flow, step, format!("expected {expected:?}: {result}")))
        }
    }

    /// One round: attempts, with retries, until an answer, or the flow is lost.
    async fn round(
        &mut self,
        flow: Flow,
        step: &'static str,
        call: &Call,
        sealed: bool,
    ) -> Result<Reply, Lost> {
        let began = Instant::now();
        let mut attempt = 0;
        loop {
            let id = self.next_id;
            self.next_id += 1;
            let from = self.clock.now();
            self.stats
                .attempts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let failure: Failure = match self
                .connection
                .attempt(id, call, sealed, self.behaviour.request_timeout)
                .await
            {
                Ok(reply) => {
                    self.stats
                        .rounds
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    self.stats.latency(flow.label(), step, began.elapsed());
                    if let Some(upstream) = &reply.upstream {
                        // With a retry to the next replica nginx lists both; the last answered.
                        let answered = upstream.rsplit(", ").next().unwrap_or(upstream);
                        self.upstreams.push(answered.to_owned());
                    }
                    return Ok(reply);
                }
                Err(failure) => failure,
            };
            let retry = failure.cause.retryable() && attempt < MAX_RETRIES;
            let mut record = self.record(flow, step, from, failure.cause, failure.detail);
            record.upstream = failure.upstream;
            record.backend = failure.backend;
            record.retried = retry;
            self.stats.error(record.clone());
            if !retry {
                return Err(record.into());
            }
            let backoff = self.behaviour.backoff * 2u32.pow(attempt);
            let jitter = backoff.mul_f64((self.next_random() % 1000) as f64 / 10_000.0);
            tokio::time::sleep(backoff + jitter).await;
            attempt += 1;
        }
    }

    fn record(&self, flow: Flow, step: &'static str, from: f64, cause: Cause, detail: String) -> ErrorRecord {
        ErrorRecord {
            from,
            to: self.clock.now(),
            cause,
            flow: flow.label(),
            step,
            target: flow.backend(),
            upstream: None,
            backend: None,
            detail,
            retried: false,
        }
    }

    /// A wrong answer: recorded, and the flow is lost.
    fn wrong(&self, flow: Flow, step: &'static str, detail: String) -> Lost {
        let record = self.record(flow, step, self.clock.now(), Cause::WrongAnswer, detail);
        self.stats.error(record.clone());
        record.into()
    }

    async fn think(&mut self) {
        self.sleep_up_to(self.behaviour.think).await;
    }

    async fn sleep_up_to(&mut self, longest: Duration) {
        let longest = longest.as_micros() as u64;
        if longest > 0 {
            let pause = self.next_random() % longest;
            tokio::time::sleep(Duration::from_micros(pause)).await;
        }
    }

    /// xorshift64*: cheap, and each user has its own sequence.
    fn next_random(&mut self) -> u64 {
        let mut x = self.random;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.random = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_follows_the_weights() {
        let mut counts = std::collections::HashMap::new();
        for random in 0..80 {
            *counts.entry(Flow::pick(random)).or_insert(0) += 1;
        }
        assert_eq!(counts[&Flow::Deploy], 12);
        assert_eq!(counts[&Flow::ListTools], 4);
        assert_eq!(counts.len(), Flow::ALL.len());
    }

    #[test]
    fn users_draw_different_sequences() {
        let stats = Arc::new(Stats::default());
        let behaviour = Behaviour {
            target: "127.0.0.1:9".parse().unwrap(),
            think: Duration::ZERO,
            pause: Duration::ZERO,
            backoff: Duration::from_millis(1),
            request_timeout: Duration::from_secs(1),
        };
        let mut a = User::new(0, behaviour, stats.clone(), Clock::start());
        let mut b = User::new(1, behaviour, stats, Clock::start());
        assert_ne!(a.next_random(), b.next_random());
    }
}
