//! One client connection: read what has arrived, run every complete request in it, send all
//! the replies with one write, repeat.
//!
//! Memory (the 2008 Facebook post: idle connections must not pin buffers): bytes are read into
//! the worker's shared read buffer and replies built in its shared write buffer. A connection
//! owns bytes only while it must: the unparsed tail of a request that has not fully arrived,
//! and replies the socket would not take yet. Both shrink back to nothing once drained, so
//! an idle connection costs its socket and this task's small state.
//!
//! Batching: all requests that arrived together are answered with one `write`, however many
//! there are (memcached before 1.6.35 wrote once per reply and lost 5x under pipelining).
//! A request whose replies would exceed [`WRITE_BUDGET`] (a multi-get of large values) is
//! paused, flushed and resumed, so the output buffer stays bounded too.

use crate::execute::{AfterRequest, Executor};
use crate::limits::BATCHES_BEFORE_YIELD;
pub use crate::limits::{READ_CHUNK, WRITE_BUDGET};
use crate::sasl::Outcome;
use crate::state::WorkerContext;
use crate::transport::Transport;
use memfleet_protocol::auth::Attempt;
use memfleet_protocol::binary::sasl::SaslGate;
use memfleet_protocol::binary::{self, BinError};
use memfleet_protocol::{
    parse, ErrorKind, GetKind, KeyBytes, MetaKey, ParseError, ParserConfig, Request,
};
use memfleet_storage::KeyHash;
use std::io;
use std::rc::Rc;

/// A connection's own buffers are released when drained if they grew beyond this.
const KEEP_CAPACITY: usize = 4 * 1024;

/// Where the parser is between reads.
#[derive(Debug, Default)]
pub struct ParseState {
    /// Bytes of a refused data block still to discard.
    swallow: usize,
    /// A paused multi-get's next key.
    resume: Option<usize>,
    /// A key dump in progress (`dump.rs`): where to go on after the output is written.
    dump: Option<Box<crate::dump::Dump>>,
    /// The connection's protocol, fixed by its first byte as memcached's `-B auto` does:
    /// `Some(true)` for binary.
    binary: Option<bool>,
    /// Passed memcached's ASCII authentication (with `--auth-file`) or binary SASL (with
    /// `--enable-sasl`).
    authenticated: bool,
    /// The last batch stopped inside a data block (a text command line has arrived, its data
    /// has not) or while swallowing a refused one: the replies so far are held, as memcached
    /// holds them while it reads a value into its item.
    in_block: bool,
    /// Flash reads the next request waits for, and those done (`flash.rs`).
    pub(crate) flash: crate::flash::FlashReads,
}

/// What a batch of processing ended with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Everything complete was run; read more.
    NeedInput,
    /// The output budget was reached; write, then process the rest.
    OutputFull,
    /// A data block that spanned reads is complete: write the replies held meanwhile, then
    /// process the rest (memcached reads exactly the rest of a block, so it answers before
    /// seeing what follows).
    Flush,
    /// Close after writing.
    Close,
    /// The next request's keys have copies on flash: write the replies so far, run
    /// `ParseState`'s flash reads, then process again (`flash.rs`).
    FlashRead,
}

/// Runs the complete requests at the start of `input`, appending replies to `out`. Returns
/// the bytes consumed and how the batch ended. I/O-free, so tests can drive it directly.
pub fn process(
    exec: &mut Executor<'_>,
    config: &ParserConfig,
    input: &[u8],
    state: &mut ParseState,
    out: &mut Vec<u8>,
    budget: usize,
) -> (usize, Flow) {
    let mut pos = 0;
    let resumed_block = std::mem::take(&mut state.in_block);
    if state.swallow > 0 {
        let n = state.swallow.min(input.len());
        pos += n;
        state.swallow -= n;
        if state.swallow > 0 {
            state.in_block = true;
            return (pos, Flow::NeedInput);
        }
        if resumed_block && pos < input.len() {
            return (pos, Flow::Flush);
        }
    }
    // A block held over from the last read completes at the first request: flush after it.
    let block_start = pos;
    let block_done = |pos: usize| resumed_block && pos > block_start && pos < input.len();
    let binary = match (state.binary, input.get(pos)) {
        (Some(b), _) => b,
        (None, Some(&first)) => *state.binary.insert(binary::is_binary(first)),
        (None, None) => return (pos, Flow::NeedInput),
    };
    if exec.server.sasl.is_some() && !binary {
        // memcached serves only the binary protocol with -S: a text request closes.
        return (pos, Flow::Close);
    }
    if binary {
        if exec.server.auth.is_some() {
            // Binary clients authenticate with SASL, which is not offered: memcached's ASCII
            // authentication is the only way in.
            return (pos, Flow::Close);
        }
        return process_binary(exec, config, input, pos, state, out, budget);
    }
    loop {
        if block_done(pos) {
            return (pos, Flow::Flush);
        }
        // Parse up to LOOKAHEAD requests, prefetch what they will touch, then run them. Each
        // request is parsed once; a lone request (pipeline depth 1) skips the prefetch.
        let mut batch: [Option<(Request<'_>, usize)>; LOOKAHEAD] = [None; LOOKAHEAD];
        let mut parsed = 0;
        let mut at = pos;
        let mut stopped = None;
        while parsed < LOOKAHEAD && at < input.len() {
            match parse(&input[at..], config) {
                Ok((request, used)) => {
                    batch[parsed] = Some((request, used));
                    parsed += 1;
                    at += used;
                }
                Err(e) => {
                    stopped = Some(e);
                    break;
                }
            }
        }
        let batch = &batch[..parsed];
        if parsed > 1 {
            prefetch(exec.handle, batch);
        }
        // By reference: a request is a few words of borrowed slices, copied once is enough.
        for (index, (request, used)) in batch.iter().flatten().enumerate() {
            let (request, used) = (request, *used);
            if out.len() >= budget {
                return (pos, Flow::OutputFull);
            }
            if block_done(pos) {
                return (pos, Flow::Flush);
            }
            if !state.authenticated {
                if let Some(credentials) = &exec.server.auth {
                    if !matches!(request, Request::Quit) {
                        authenticate(exec, credentials, request, state, out);
                        pos += used;
                        continue;
                    }
                }
            }
            if exec.server.flash.is_some() && flash_gate(exec, request, &mut state.flash) {
                // While it waits, the reads of the requests pipelined after it go to the
                // device too: a pipelining client keeps several reads in flight.
                for (later, _) in batch[index + 1..].iter().flatten() {
                    flash_prefetch(exec, later, &mut state.flash);
                }
                return (pos, Flow::FlashRead);
            }
            let start = state.resume.take().unwrap_or(0);
            let next = if crate::dump::handles(request) {
                crate::dump::run(
                    exec,
                    request,
                    &mut state.dump,
                    &mut state.flash,
                    out,
                    budget,
                )
            } else {
                exec.run(request, out, start, budget)
            };
            match next {
                AfterRequest::Continue => pos += used,
                AfterRequest::Close => return (pos + used, Flow::Close),
                AfterRequest::Resume(key) => {
                    state.resume = Some(key);
                    return (pos, Flow::OutputFull);
                }
                AfterRequest::FlashRead => return (pos, Flow::FlashRead),
            }
        }
        match stopped {
            None if pos < input.len() => continue,
            None => {
                return (
                    pos,
                    if out.len() >= budget {
                        Flow::OutputFull
                    } else {
                        Flow::NeedInput
                    },
                )
            }
            Some(ParseError::Incomplete) => {
                // A complete command line means its data block is what is missing.
                state.in_block = memchr_newline(&input[pos..]).is_some();
                return (pos, Flow::NeedInput);
            }
            Some(ParseError::Invalid(rejection)) => {
                if out.len() >= budget {
                    // Answer the rejection after the client has taken the replies so far.
                    return (pos, Flow::OutputFull);
                }
                if rejection.kind == ErrorKind::TooLarge {
                    if let Some(key) = replaced_key(&input[pos..]) {
                        // memcached unlinks the old value of a `set` it cannot store, so a
                        // failed update never leaves stale data readable.
                        exec.handle.delete(&key);
                    }
                }
                // Before authenticating, memcached refuses even malformed commands the same
                // way, and a `set` whose data block is not followed by `\r\n` with its own
                // words (the request is still skipped or the connection closed as usual).
                let locked = exec.server.auth.is_some() && !state.authenticated;
                out.extend_from_slice(if locked {
                    memfleet_protocol::auth::rejection_reply(rejection.kind)
                } else {
                    rejection.reply()
                });
                match skip_rejected(input.len(), pos, rejection.skip, rejection.close(), state) {
                    Ok(next) => pos = next,
                    Err(end) => {
                        state.in_block = state.swallow > 0;
                        return end;
                    }
                }
            }
        }
    }
}

/// A request before authentication: a `set` is the attempt (memcached's ASCII auth: its
/// data is `<user> <password>`; nothing is stored), anything else is refused.
fn authenticate(
    exec: &Executor<'_>,
    credentials: &crate::auth::Credentials,
    request: &Request<'_>,
    state: &mut ParseState,
    out: &mut Vec<u8>,
) {
    let attempt = credentials.attempt(request);
    match attempt {
        Attempt::Accepted => state.authenticated = true,
        Attempt::Refused => exec.counters.auth_errors.incr(),
        Attempt::NotAnAttempt => {}
    }
    if attempt != Attempt::NotAnAttempt {
        exec.counters.auth_cmds.incr();
    }
    out.extend_from_slice(attempt.reply());
}

/// After a rejected request at `pos`: where parsing goes on (its `skip` bytes discarded;
/// those not buffered yet are swallowed as they arrive), or how the batch ends (the error
/// closes the connection, or the rest of the refused block is still to come).
fn skip_rejected(
    input_len: usize,
    pos: usize,
    skip: usize,
    close: bool,
    state: &mut ParseState,
) -> Result<usize, (usize, Flow)> {
    if close {
        return Err((input_len, Flow::Close));
    }
    let available = input_len - pos;
    if skip <= available {
        Ok(pos + skip)
    } else {
        state.swallow = skip - available;
        Err((input_len, Flow::NeedInput))
    }
}

/// Requests parsed ahead of running them, so their memory accesses can be prefetched.
const LOOKAHEAD: usize = 16;

/// Prefetches, for a batch of parsed requests, first every key's hash bucket, then every
/// key's item header: the cache misses of the batch overlap instead of queueing one after
/// another (two dependent misses per lookup otherwise dominate a pipelined get).
fn prefetch(handle: &memfleet_storage::Handle, batch: &[Option<(Request<'_>, usize)>]) {
    // Each key hashed once for both steps.
    let mut hashes = [KeyHash::default(); LOOKAHEAD * 4];
    let mut n = 0;
    for (request, _) in batch.iter().flatten() {
        // At most four keys a request, so that `hashes` cannot overflow.
        request.keys().take(4).for_each(|key| {
            let hash = KeyHash::of(&key.bytes());
            handle.prefetch_bucket(hash);
            hashes[n] = hash;
            n += 1;
        });
    }
    for &hash in &hashes[..n] {
        handle.prefetch_item(hash);
    }
}

/// Starts the device reads `request`'s keys will need when it runs, without running it
/// (a request pipelined behind one waiting for flash; `flash::prefetch_key`).
fn flash_prefetch(
    exec: &mut Executor<'_>,
    request: &Request<'_>,
    reads: &mut crate::flash::FlashReads,
) {
    if crate::flash::blind(request) {
        return;
    }
    let handle = &*exec.handle;
    for key in request.keys() {
        crate::flash::prefetch_key(handle, &key.bytes(), reads);
    }
}

/// Brings `request`'s keys' flash copies into RAM before it runs; true when it must wait for
/// device reads first (`flash.rs`).
fn flash_gate(
    exec: &mut Executor<'_>,
    request: &Request<'_>,
    reads: &mut crate::flash::FlashReads,
) -> bool {
    if !exec.handle.flash_in_use() || crate::flash::blind(request) {
        return false;
    }
    // A plain get or gets may serve flash items from their bytes; everything else moves
    // them into RAM first.
    let plain_get =
        matches!(request, Request::Get(g) if matches!(g.kind, GetKind::Get | GetKind::Gets));
    let mut served = plain_get.then_some(&mut exec.flash_items);
    let handle = &mut *exec.handle;
    for key in request.keys() {
        crate::flash::gate_key(handle, &key.bytes(), reads, served.as_deref_mut());
    }
    reads.finish()
}

/// [`process`] for a binary-protocol connection.
fn process_binary(
    exec: &mut Executor<'_>,
    config: &ParserConfig,
    input: &[u8],
    mut pos: usize,
    state: &mut ParseState,
    out: &mut Vec<u8>,
    budget: usize,
) -> (usize, Flow) {
    loop {
        if out.len() >= budget {
            return (pos, Flow::OutputFull);
        }
        if pos == input.len() {
            return (pos, Flow::NeedInput);
        }
        if let Some(db) = &exec.server.sasl {
            match binary::sasl::gate(&input[pos..], state.authenticated) {
                SaslGate::Pass => {}
                SaslGate::Incomplete => return (pos, Flow::NeedInput),
                SaslGate::Refuse(to) => {
                    binary::sasl::auth_failure(out, to);
                    return (pos, Flow::Close);
                }
                SaslGate::Sasl(request, to, used) => {
                    pos += used;
                    match db.serve(&request, to, out) {
                        Outcome::Listed => {}
                        Outcome::Accepted => {
                            state.authenticated = true;
                            exec.counters.auth_cmds.incr();
                        }
                        Outcome::Refused => {
                            exec.counters.auth_cmds.incr();
                            exec.counters.auth_errors.incr();
                        }
                    }
                    continue;
                }
                SaslGate::Invalid(rejection) => {
                    rejection.reply(out);
                    match skip_rejected(input.len(), pos, rejection.skip, rejection.close(), state)
                    {
                        Ok(next) => pos = next,
                        Err(end) => return end,
                    }
                    continue;
                }
            }
        }
        match binary::parse(&input[pos..], config) {
            Ok((request, used)) => {
                if let (Some(_), Some(key)) = (&exec.server.flash, request.command.key()) {
                    if exec.handle.flash_in_use() && !crate::flash::blind_binary(&request.command) {
                        crate::flash::gate_key(exec.handle, key, &mut state.flash, None);
                        if state.flash.finish() {
                            return (pos, Flow::FlashRead);
                        }
                    }
                }
                pos += used;
                if exec.run_binary(&request, out) == AfterRequest::Close {
                    return (pos, Flow::Close);
                }
            }
            Err(BinError::Incomplete) => return (pos, Flow::NeedInput),
            Err(BinError::Invalid(rejection)) => {
                if let Some(key) = rejection.stale_key(&input[pos..]) {
                    // As for a text `set`: a refused value must not leave the old one.
                    exec.handle.delete(key);
                }
                rejection.reply(out);
                match skip_rejected(input.len(), pos, rejection.skip, rejection.close(), state) {
                    Ok(next) => pos = next,
                    Err(end) => return end,
                }
            }
        }
    }
}

/// The key of a `set` or an `ms` at the start of `input`: the value it would replace must
/// go when the new one is refused as too large, so a failed update never leaves stale data
/// readable (memcached unlinks it for `set`, and for `ms` in every mode).
fn replaced_key(input: &[u8]) -> Option<KeyBytes<'_>> {
    let end = memchr_newline(input)?;
    let mut tokens = input[..end].split(|&b| b == b' ').filter(|t| !t.is_empty());
    let command = tokens.next()?;
    let key = tokens.next()?;
    match command {
        b"set" => Some(KeyBytes::Borrowed(key)),
        b"ms" => {
            let base64 = tokens.skip(1).any(|t| t == b"b");
            Some(MetaKey::new(key, base64).bytes())
        }
        _ => None,
    }
}

fn memchr_newline(input: &[u8]) -> Option<usize> {
    let nl = input.iter().position(|&b| b == b'\n')?;
    Some(if nl > 0 && input[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    })
}

/// Serves one connection until the client leaves, a request closes it, it idles past the
/// timeout, or the server shuts down.
pub(crate) async fn serve<T: Transport>(ctx: &Rc<WorkerContext>, mut stream: T) -> io::Result<()> {
    let result = serve_stream(ctx, &mut stream).await;
    stream.close();
    result
}

async fn serve_stream<T: Transport>(ctx: &Rc<WorkerContext>, stream: &mut T) -> io::Result<()> {
    let server = &ctx.server;
    let settings = &server.settings;
    // The longest input that can be a single valid request: a full-size item and its
    // command line, or a multi-get line of several thousand keys.
    let max_pending = settings.limits.max_item_size + 64 * 1024;
    let mut pending_in: Vec<u8> = Vec::new();
    let mut pending_out: Vec<u8> = Vec::new();
    // Replies held while a data block arrives (at most one batch's).
    let mut held_out: Vec<u8> = Vec::new();
    let mut state = ParseState::default();
    let mut input_waiting = false;
    let mut batches = 0u32;
    // The idle timeout runs from the last completed request (as memcached's does), so a
    // client trickling a command line byte by byte is still timed out; while a data block
    // is arriving it runs from the last read instead. Only kept when a timeout is set.
    let timeout = settings.limits.idle_timeout;
    let mut idle_since = timeout.map(|_| tokio::time::Instant::now());

    loop {
        if !input_waiting {
            // Read: into the connection's own buffer if it holds a partial request (so a large
            // value is not copied back and forth), otherwise into the worker's.
            let read = loop {
                let result = {
                    let mut shared_buf = ctx.read_buf.borrow_mut();
                    let buf: &mut Vec<u8> = if pending_in.is_empty() {
                        shared_buf.clear();
                        &mut shared_buf
                    } else {
                        &mut pending_in
                    };
                    buf.reserve(READ_CHUNK);
                    stream.try_read_buf(buf)
                };
                match result {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        batches = 0;
                        // No shutdown signal here (it would cost a lock per wait): the
                        // worker aborts its connections at shutdown, which can only happen
                        // at an await, i.e. between batches.
                        let wait = match idle_since.zip(timeout) {
                            // The common case, kept free of select!'s bookkeeping.
                            None => stream.readable().await.map(|_| true),
                            Some((since, t)) => tokio::select! {
                                biased;
                                r = stream.readable() => r.map(|_| true),
                                _ = tokio::time::sleep_until(since + t) => Ok(false),
                            },
                        };
                        if !wait? {
                            return Ok(());
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            };
            if read == 0 {
                return Ok(());
            }
            ctx.counters.bytes_read.add(read as u64);
            if idle_since.is_some() && in_data_block(&pending_in, &state) {
                idle_since = Some(tokio::time::Instant::now());
            }
        }

        let (used, flow) = {
            let mut shared_buf = ctx.read_buf.borrow_mut();
            let mut out = ctx.write_buf.borrow_mut();
            let mut handle = ctx.handle.borrow_mut();
            out.clear();
            let mut exec = Executor {
                handle: &mut handle,
                counters: &ctx.counters,
                server,
                read_only: false,
                pins: Default::default(),
                flash_items: Vec::new(),
            };
            if pending_in.is_empty() {
                let (used, flow) = process(
                    &mut exec,
                    &server.parser,
                    &shared_buf,
                    &mut state,
                    &mut out,
                    WRITE_BUDGET,
                );
                pending_in.extend_from_slice(&shared_buf[used..]);
                shared_buf.clear();
                (used, flow)
            } else {
                let (used, flow) = process(
                    &mut exec,
                    &server.parser,
                    &pending_in,
                    &mut state,
                    &mut out,
                    WRITE_BUDGET,
                );
                pending_in.drain(..used);
                (used, flow)
            }
        };
        if used > 0 && idle_since.is_some() {
            idle_since = Some(tokio::time::Instant::now());
        }
        if pending_in.capacity() > KEEP_CAPACITY && pending_in.len() < pending_in.capacity() / 4 {
            // A large request is done; keep only what the next one needs (an idle connection
            // holding one byte of its next request must not pin a megabyte).
            pending_in.shrink_to(pending_in.len().max(KEEP_CAPACITY));
        }

        if flow == Flow::NeedInput && state.in_block {
            // memcached sends nothing while it reads a value into its item.
            held_out.extend_from_slice(&ctx.write_buf.borrow());
        } else {
            if !held_out.is_empty() {
                let mut out = ctx.write_buf.borrow_mut();
                held_out.extend_from_slice(&out);
                out.clear();
                out.extend_from_slice(&held_out);
                held_out = Vec::new();
            }
            write_replies(ctx, stream, &mut pending_out).await?;
        }

        if flow != Flow::FlashRead {
            // Prefetched reads no request claimed (their slots changed meanwhile).
            state.flash.forget_unclaimed();
        }
        match flow {
            Flow::Close => return Ok(()),
            Flow::OutputFull | Flow::Flush => input_waiting = true,
            Flow::FlashRead => {
                if let Some(files) = &server.flash {
                    state.flash.run(files, ctx.flash_ring(), &ctx.handle).await;
                }
                input_waiting = true;
            }
            Flow::NeedInput => {
                input_waiting = false;
                if pending_in.len() > max_pending {
                    tracing::debug!(bytes = pending_in.len(), "request too large; closing");
                    return Ok(());
                }
            }
        }
        batches += 1;
        if batches >= BATCHES_BEFORE_YIELD {
            batches = 0;
            ctx.counters.conn_yields.incr();
            tokio::task::yield_now().await;
        }
    }
}

/// Sends the worker's write buffer, keeping what the socket will not take now in
/// `pending_out` and waiting until it is gone (a client that stops reading stops being
/// served, rather than growing our buffers).
async fn write_replies<T: Transport>(
    ctx: &WorkerContext,
    stream: &mut T,
    pending_out: &mut Vec<u8>,
) -> io::Result<()> {
    {
        let out = ctx.write_buf.borrow();
        if out.is_empty() {
            return Ok(());
        }
        let mut sent = 0;
        while sent < out.len() {
            match stream.try_write(&out[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        ctx.counters.bytes_written.add(sent as u64);
        if sent == out.len() && stream.try_flush()? {
            return Ok(());
        }
        pending_out.extend_from_slice(&out[sent..]);
    }
    let timeout = ctx.server.settings.limits.idle_timeout;
    // Until both our pending replies and the transport's own output (TLS records the
    // socket would not take yet) are gone.
    while !pending_out.is_empty() || !stream.try_flush()? {
        let ready = tokio::select! {
            r = stream.writable() => r.map(|_| true),
            _ = idle_until(timeout.map(|t| tokio::time::Instant::now() + t)) => Ok(false),
        };
        if !ready? {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "client stopped reading its replies",
            ));
        }
        if pending_out.is_empty() {
            continue;
        }
        match stream.try_write(pending_out) {
            Ok(n) => {
                ctx.counters.bytes_written.add(n as u64);
                pending_out.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if pending_out.capacity() > KEEP_CAPACITY {
        *pending_out = Vec::new();
    }
    Ok(())
}

/// Completes at `deadline`, or never when there is none.
async fn idle_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Whether the connection is receiving a request's data block (a text command line has
/// arrived, a binary header has, or a refused block is being swallowed): memcached does not
/// time out such a connection while bytes keep coming.
fn in_data_block(pending: &[u8], state: &ParseState) -> bool {
    state.swallow > 0
        || match state.binary {
            Some(true) => pending.len() >= binary::HEADER_LEN,
            _ => pending.contains(&b'\n'),
        }
}
