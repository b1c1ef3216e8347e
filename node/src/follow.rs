//! A split model driven by rank 0 alone (`distributed.leader`): rank 0 takes the
//! calls (a server, a script), and every other process runs `follow()`, which
//! repeats rank 0's work step for step. Every process must run the same
//! forward passes in the same order, since each pass sums partial results over
//! the group; here rank 0 says, before each step of its batch scheduler, what
//! changes before that step (generations that start, with their prompt, options
//! and prompt cache; caches trimmed or freed; generations aborted), and every
//! process applies it, then runs the step. The schedulers, fed the same
//! changes at the same steps, make the same batches, so batching works split
//! too. Rank 0 picks the seed of an unseeded request, so every process samples
//! the same tokens.
//!
//! MLX's ring backend waits for a message by polling its socket, which keeps a
//! core busy; an idle follower must not (a server is idle most of the time).
//! So a follower whose scheduler has nothing to do waits on a plain TCP
//! connection to rank 0, the doorbell, which costs nothing while it waits;
//! rank 0 rings it before the first step after an idle spell.
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lm::batch::Request;
use lm::cache::CacheOptions;
use lm::parallel::Shard;
use lm::prompt_cache::PromptCache;
use lm::text::TextOptions;
use lm::LmError;
use serde::{Deserialize, Serialize};

use crate::engine::ModelState;

/// One change, applied in order before a step.
#[derive(Serialize, Deserialize)]
pub enum Op {
    /// A generation joins the scheduler; `cache`: rank 0's prompt cache (its
    /// id and options; each follower makes its copy on first use), or none.
    Start { id: u64, prompt: Vec<u32>, options: Box<TextOptions>, cache: Option<(u64, CacheOptions)> },
    /// A prompt cache lost its last `n` positions.
    Trim { cache: u64, n: usize },
    /// A prompt cache was disposed.
    Free { cache: u64 },
}

/// What rank 0 says before each step (an empty message: just step).
#[derive(Serialize, Deserialize, Default)]
struct Message {
    ops: Vec<Op>,
    /// Generations that stop at this step (their results say 'abort').
    abort: Vec<u64>,
    /// Rank 0's model is gone: stop following.
    end: bool,
    /// Rank 0's `maxBatch` (with any op): the schedulers batch alike.
    #[serde(default)]
    batch: usize,
}

impl Message {
    fn encode(&self) -> Vec<u8> {
        if self.ops.is_empty() && self.abort.is_empty() && !self.end {
            return Vec::new();
        }
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// A running generation of rank 0's: its own abort flag (a signal, a closed
/// stream) and the one every process agreed on, which the scheduler reads.
struct Live {
    id: u64,
    asked: Box<dyn Fn() -> bool + Send>,
    agreed: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
}

/// Rank 0's side.
pub struct Leader {
    shard: Shard,
    max_batch: usize,
    /// One connection to each follower (none without a host file to find rank 0 by).
    doorbells: Vec<TcpStream>,
    next_id: u64,
    ops: Vec<Op>,
    starts: Vec<Request>,
    live: Vec<Live>,
}

impl Leader {
    /// Sets up the doorbells with the followers (`join_doorbell` on their side,
    /// at the same point of loading), each waited for at most `timeout`.
    pub fn new(shard: Shard, max_batch: usize, timeout: Duration) -> Result<Leader, LmError> {
        let doorbells = ring_doorbells(&shard, timeout)?;
        Ok(Leader { shard, max_batch, doorbells, next_id: 1, ops: Vec::new(), starts: Vec::new(), live: Vec::new() })
    }

    /// Something to tell the others before the next step.
    pub fn has_news(&self) -> bool {
        !self.ops.is_empty()
    }

    /// Queues `req` to start on every process before the next step; `cache`:
    /// its prompt cache's id and options, when it has one.
    pub fn start(&mut self, mut req: Request, cache: Option<(u64, CacheOptions)>) {
        let id = self.next_id;
        self.next_id += 1;
        if req.options.params.seed.is_none() {
            req.options.params.seed = Some(fresh_seed(id));
        }
        let op = Op::Start { id, prompt: req.prompt.clone(), options: Box::new(req.options.clone()), cache };
        // Checked now, so that every message of a tick can be sent (JSON has no NaN).
        if let Err(e) = serde_json::to_vec(&op) {
            let e = LmError::InvalidArgument(format!("these options cannot be sent to the other processes: {e}"));
            return (req.on_done)(Err(e), req.cache);
        }
        let agreed = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let flag = agreed.clone();
        let asked = std::mem::replace(&mut req.should_abort, Box::new(move || flag.load(Ordering::Relaxed)));
        let (finished, on_done) = (done.clone(), req.on_done);
        req.on_done = Box::new(move |result, cache| {
            finished.store(true, Ordering::Relaxed);
            on_done(result, cache)
        });
        self.ops.push(op);
        self.starts.push(req);
        self.live.push(Live { id, asked, agreed, done });
    }

    /// A change to a prompt cache (trimmed or freed on this process already).
    pub fn push(&mut self, op: Op) {
        self.ops.push(op);
    }

    /// Tells every process what changes before this step; returns the requests
    /// to admit now. On failure (a lost peer) the requests that were to start
    /// fail with the error.
    pub fn exchange(&mut self, followers_idle: bool) -> Result<Vec<Request>, LmError> {
        if followers_idle {
            self.ring();
        }
        self.live.retain(|l| !l.done.load(Ordering::Relaxed));
        let abort: Vec<u64> = self.live.iter().filter(|l| !l.agreed.load(Ordering::Relaxed) && (l.asked)()).map(|l| l.id).collect();
        let message = Message { ops: std::mem::take(&mut self.ops), abort, end: false, batch: self.max_batch };
        let starts = std::mem::take(&mut self.starts);
        if let Err(e) = self.shard.broadcast(Some(&message.encode())) {
            for req in starts {
                (req.on_done)(Err(e.clone()), req.cache);
            }
            return Err(e);
        }
        for l in self.live.iter().filter(|l| message.abort.contains(&l.id)) {
            l.agreed.store(true, Ordering::Relaxed);
        }
        Ok(starts)
    }

    /// Rank 0's model is going away: the others stop following (best effort:
    /// a lost peer has stopped already).
    pub fn end(&mut self, followers_idle: bool) {
        if followers_idle {
            self.ring();
        }
        let _ = self.shard.broadcast(Some(&Message { end: true, ..Message::default() }.encode()));
    }
}

impl Leader {
    /// Wakes the followers, which wait on their doorbell while idle (a follower
    /// that is gone shows at the next collective).
    fn ring(&mut self) {
        for bell in &mut self.doorbells {
            let _ = bell.write_all(&[1]);
        }
    }
}

/// Rank 0's address as the ring's host file gives it (MLX_HOSTFILE: a JSON
/// list per rank of "ip:port"), if there is one.
fn rank0_ip() -> Option<String> {
    let text = std::fs::read_to_string(std::env::var_os("MLX_HOSTFILE")?).ok()?;
    let hosts: Vec<Vec<String>> = serde_json::from_str(&text).ok()?;
    let first = hosts.first()?.first()?;
    Some(first.rsplit_once(':').map_or(first.as_str(), |(ip, _)| ip).to_string())
}

/// Rank 0's side of the doorbells: listens on any port, tells the others which
/// (0: none, without a host file), and takes one connection from each.
fn ring_doorbells(shard: &Shard, timeout: Duration) -> Result<Vec<TcpStream>, LmError> {
    let fail = |e: std::io::Error| LmError::Distributed(format!("rank 0 cannot open its doorbell for the followers: {e}"));
    let listener = match rank0_ip() {
        Some(_) => Some(TcpListener::bind(("0.0.0.0", 0)).map_err(fail)?),
        None => None,
    };
    let port = match &listener {
        Some(l) => l.local_addr().map_err(fail)?.port(),
        None => 0,
    };
    shard.broadcast(Some(&port.to_le_bytes()))?;
    let Some(listener) = listener else { return Ok(Vec::new()) };
    listener.set_nonblocking(true).map_err(fail)?;
    let deadline = std::time::Instant::now() + timeout;
    let mut bells = Vec::new();
    while bells.len() + 1 < shard.size as usize {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(fail)?;
                s.set_nodelay(true).map_err(fail)?;
                bells.push(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => {
                return Err(LmError::Distributed(format!(
                    "the followers did not connect to rank 0's doorbell within {} s: {e}",
                    timeout.as_secs_f64()
                )))
            }
        }
    }
    Ok(bells)
}

/// A follower's side of `ring_doorbells`: its connection to rank 0, if rank 0 opened one.
pub fn join_doorbell(shard: &Shard, timeout: Duration) -> Result<Option<TcpStream>, LmError> {
    let bytes = shard.broadcast(None)?;
    let port = u16::from_le_bytes([bytes.first().copied().unwrap_or(0), bytes.get(1).copied().unwrap_or(0)]);
    if port == 0 {
        return Ok(None);
    }
    let ip = rank0_ip()
        .ok_or_else(|| LmError::Distributed("rank 0 opened a doorbell but this process has no host file (MLX_HOSTFILE) to find it by".into()))?;
    let fail = |e: std::io::Error| LmError::Distributed(format!("cannot reach rank 0's doorbell at {ip}:{port}: {e}"));
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&(ip.as_str(), port)).map_err(fail)?.next();
    let addr = addr.ok_or_else(|| LmError::Distributed(format!("rank 0's address {ip} does not resolve")))?;
    let stream = TcpStream::connect_timeout(&addr, timeout).map_err(fail)?;
    stream.set_nodelay(true).map_err(fail)?;
    Ok(Some(stream))
}

/// A seed for an unseeded request, the same on every process since rank 0 sends it.
fn fresh_seed(id: u64) -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    (nanos ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % (u32::MAX as u64 + 1)
}

/// A follower's copies of rank 0's prompt caches, by rank 0's id.
#[derive(Default)]
struct Caches {
    idle: HashMap<u64, PromptCache>,
    freed: HashSet<u64>,
}

/// A follower's side: repeats rank 0's work until rank 0's model is disposed
/// (Ok) or a peer is lost (a `Distributed` error).
pub fn follow(state: &mut ModelState, shard: &Shard, mut doorbell: Option<&mut TcpStream>) -> Result<(), LmError> {
    let caches = Arc::new(Mutex::new(Caches::default()));
    let mut flags: HashMap<u64, Arc<AtomicBool>> = HashMap::new();
    loop {
        if let (true, Some(bell)) = (state.scheduler.is_idle(), doorbell.as_deref_mut()) {
            let mut b = [0u8; 1];
            bell.read_exact(&mut b).map_err(|e| LmError::Distributed(format!("connection to rank 0 was lost: {e}")))?;
        }
        let bytes = shard.broadcast(None)?;
        let message: Message = if bytes.is_empty() {
            Message::default()
        } else {
            serde_json::from_slice(&bytes).map_err(|e| LmError::Distributed(format!("rank 0 sent a message this process cannot read: {e}")))?
        };
        if message.end {
            state.scheduler.abort_all(state.model.as_ref());
            return Ok(());
        }
        if message.batch > 0 {
            state.scheduler.set_max_batch(message.batch);
        }
        for op in message.ops {
            apply(state, op, &caches, &mut flags)?;
        }
        for id in &message.abort {
            if let Some(f) = flags.get(id) {
                f.store(true, Ordering::Relaxed);
            }
        }
        // A flag the request no longer holds belongs to a finished generation.
        flags.retain(|_, f| Arc::strong_count(f) > 1);
        state.scheduler.tick(state.model.as_ref());
    }
}

fn apply(state: &mut ModelState, op: Op, caches: &Arc<Mutex<Caches>>, flags: &mut HashMap<u64, Arc<AtomicBool>>) -> Result<(), LmError> {
    let poisoned = |_| LmError::Mlx("a follower's cache table lock was poisoned".into());
    match op {
        Op::Start { id, prompt, options, cache } => {
            let model = state.model.as_ref();
            let (cache, back) = match cache {
                None => (PromptCache::scratch(model), None),
                Some((cid, opts)) => {
                    let held = caches.lock().map_err(poisoned)?.idle.remove(&cid);
                    (
                        match held {
                            Some(c) => c,
                            None => PromptCache::new(model, opts)?,
                        },
                        Some(cid),
                    )
                }
            };
            let flag = Arc::new(AtomicBool::new(false));
            flags.insert(id, flag.clone());
            let table = caches.clone();
            state.scheduler.admit(
                model,
                Request {
                    prompt,
                    options: *options,
                    cache,
                    should_abort: Box::new(move || flag.load(Ordering::Relaxed)),
                    on_chunk: Box::new(|_| {}),
                    on_done: Box::new(move |_, cache| {
                        if let (Some(cid), Ok(mut t)) = (back, table.lock()) {
                            if !t.freed.contains(&cid) {
                                t.idle.insert(cid, cache);
                            }
                        }
                    }),
                },
            );
        }
        Op::Trim { cache, n } => {
            if let Some(c) = caches.lock().map_err(poisoned)?.idle.get_mut(&cache) {
                c.trim(n);
            }
        }
        Op::Free { cache } => {
            let mut t = caches.lock().map_err(poisoned)?;
            t.idle.remove(&cache);
            t.freed.insert(cache);
        }
    }
    Ok(())
}
