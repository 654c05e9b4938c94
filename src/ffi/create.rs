//! Creating a queue of any kind from C: the options of `tvmq create` in a
//! struct ([`TvmQueueOptions`]) that can grow without breaking programs
//! built against an older tvm.h (its first member is its size).

use super::common::text;
use super::local::define_with;
use super::net::client;
use super::{SATvm, TABLE, TCREATE, call, call_no_handle};
use crate::error::*;
use crate::file::queue_dir;
use crate::queue::Queue;
use crate::spec::{DEFAULT_UNBLOCK_TIMEOUT_MS, Durability, LeaseSpec, Spec};
use std::ffi::{c_char, c_long, c_uint, c_ulonglong};

/// lCreateQueueEx: the queue is not durable (the default).
pub const TVM_DURABLE_NONE: c_uint = 0;
/// lCreateQueueEx: a durable queue whose pushes and pops return once on
/// stable storage (`tvmq create --durable always`).
pub const TVM_DURABLE_ALWAYS: c_uint = 1;
/// lCreateQueueEx: a durable queue synced within `durable_interval_ms`
/// (`tvmq create --durable interval=MS`).
pub const TVM_DURABLE_INTERVAL: c_uint = 2;

/// Everything `tvmq create` offers, for lCreateQueueEx. Fill it with
/// lInitQueueOptions(&o, sizeof(o)) (the defaults of `tvmq create`), then
/// set what you need. Later versions of tvmq only add members at the end:
/// a program built against this tvm.h keeps working with them.
#[repr(C)]
pub struct TvmQueueOptions {
    /// sizeof(TvmQueueOptions) as the program was compiled (set by
    /// lInitQueueOptions): how many bytes of the struct the library reads.
    pub size: usize,
    /// Exact capacity in records (`--rows`), at least 1.
    pub rows: usize,
    /// Largest record in bytes (`--size`), at least 1; 0 with `def`: the
    /// size of the struct that `def`'s QUEUE names.
    pub record_size: usize,
    /// The queue's name (`--name`, at most 63 bytes kept); NULL: from
    /// `def`'s QUEUE (its first argument as written), else none.
    pub name: *const c_char,
    /// Partition text (`--part`, at most 31 bytes kept); NULL: from `def`,
    /// else none.
    pub part: *const c_char,
    /// The record layout: a function written with QUEUE, FIELD and FINISH,
    /// as lTableQueue takes (NULL: no field list).
    pub def: TCREATE,
    /// Permission bits of the file (`--mode`), default 0600; only the bits
    /// of 0777.
    pub mode: c_uint,
    /// TVM_DURABLE_NONE (default), TVM_DURABLE_ALWAYS or
    /// TVM_DURABLE_INTERVAL (`--durable`).
    pub durable: c_uint,
    /// With TVM_DURABLE_INTERVAL: the interval in milliseconds, 1 to 3600000.
    pub durable_interval_ms: c_uint,
    /// True: pops spin `spin_us` microseconds on an empty queue before they
    /// sleep (-1: never sleep) (`--spin-us`); false (default): the
    /// library's few microseconds.
    pub has_spin: bool,
    /// See `has_spin`: -1, or 0 and more.
    pub spin_us: c_long,
    /// How long a stalled slot whose holder cannot be identified is waited
    /// for before it is recovered (`--unblock-timeout-ms`), default 10000.
    pub unblock_timeout_ms: c_ulonglong,
    /// True: the queue has leases (lPopLease and the other lease calls) with
    /// the four settings below (`--lease-ms` and friends); false (default):
    /// a plain queue, the four are ignored.
    pub leases: bool,
    /// Leases: default lease time in milliseconds (1 to a year; default 30000).
    pub lease_ms: c_ulonglong,
    /// Leases: deliveries without an ack after which a record goes to the
    /// dead-letter queue (0, the default: no limit; at most 65535).
    pub max_deliveries: c_uint,
    /// Leases: true when `dead_letter` names the dead-letter queue (default
    /// false: rejected records are dropped, counted).
    pub has_dead_letter: bool,
    /// Leases: the dead-letter queue's id (not the queue itself).
    pub dead_letter: TABLE,
    /// Leases: most leases in flight (1 to 1048576; default 1024).
    pub max_leases: c_ulonglong,
}

impl TvmQueueOptions {
    /// The defaults of `tvmq create`.
    fn defaults() -> TvmQueueOptions {
        let l = LeaseSpec::default();
        TvmQueueOptions {
            size: std::mem::size_of::<TvmQueueOptions>(),
            rows: 0,
            record_size: 0,
            name: std::ptr::null(),
            part: std::ptr::null(),
            def: None,
            mode: 0o600,
            durable: TVM_DURABLE_NONE,
            durable_interval_ms: 0,
            has_spin: false,
            spin_us: 0,
            unblock_timeout_ms: DEFAULT_UNBLOCK_TIMEOUT_MS,
            leases: false,
            lease_ms: l.lease_ms,
            max_deliveries: l.max_deliveries,
            has_dead_letter: false,
            dead_letter: 0,
            max_leases: l.max_leases,
        }
    }
}

/// Fills `*opt` with the defaults of `tvmq create` (no rows, no record
/// size: set them) and sets opt->size = `size`, which must be
/// sizeof(TvmQueueOptions) as the program sees it. Thread-safe.
/// Errors (RC_FAIL, lGetTErrno()): CONDIT_IS_NIL (NULL opt, or `size`
/// smaller than the first version of the struct: nothing written).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lInitQueueOptions(opt: *mut TvmQueueOptions, size: usize) -> c_long {
    call_no_handle(|| {
        if opt.is_null() || size < std::mem::size_of::<TvmQueueOptions>() {
            return Err(Error::new(CONDIT_IS_NIL, "NULL options, or a size below sizeof(TvmQueueOptions)").into());
        }
        let mut d = TvmQueueOptions::defaults();
        d.size = size;
        // SAFETY: the caller provides `size` writable bytes at `opt`
        // (size >= our struct): ours first, the rest zeroed (members of a
        // later version, whose zero is their default).
        unsafe {
            opt.write(d);
            let rest = size - std::mem::size_of::<TvmQueueOptions>();
            std::ptr::write_bytes(opt.cast::<u8>().add(std::mem::size_of::<TvmQueueOptions>()), 0, rest);
        }
        Ok(0)
    })
}

/// The caller's options, checked: not NULL, `size` set, no member of a
/// later tvm.h set.
///
/// # Safety
/// `opt` is NULL or points to `opt->size` readable bytes, a TvmQueueOptions
/// first.
unsafe fn options<'a>(opt: *const TvmQueueOptions) -> Result<&'a TvmQueueOptions> {
    if opt.is_null() {
        return Err(Error::new(CONDIT_IS_NIL, "NULL options"));
    }
    // SAFETY: non-NULL; the caller provides at least the first member.
    let size = unsafe { opt.cast::<usize>().read_unaligned() };
    let ours = std::mem::size_of::<TvmQueueOptions>();
    if size < ours {
        return Err(Error::new(
            CONDIT_IS_NIL,
            format!("options of {size} bytes: set size with lInitQueueOptions(&o, sizeof(o))"),
        ));
    }
    // SAFETY: the caller provides `size` readable bytes at `opt`.
    let later = unsafe { std::slice::from_raw_parts(opt.cast::<u8>().add(ours), size - ours) };
    if later.iter().any(|&b| b != 0) {
        return Err(Error::new(NOT_SUPPT_OPT, "options of a later tvm.h that this library does not know"));
    }
    // SAFETY: at least `ours` readable bytes, a TvmQueueOptions.
    Ok(unsafe { &*opt })
}

/// The Spec that `o` asks for (the record size and field list of `def`
/// still to come).
fn spec_of(o: &TvmQueueOptions) -> Result<Spec> {
    let mut spec = Spec::new(o.rows as u64, o.record_size as u64);
    spec.mode = o.mode;
    spec.unblock_timeout_ms = o.unblock_timeout_ms;
    #[allow(clippy::useless_conversion)] // c_long is 32 bits on some targets
    let spin = i64::from(o.spin_us);
    spec.spin_us = o.has_spin.then_some(spin);
    spec.durability = match o.durable {
        TVM_DURABLE_NONE => None,
        TVM_DURABLE_ALWAYS => Some(Durability::Always),
        TVM_DURABLE_INTERVAL => Some(Durability::Interval(o.durable_interval_ms)),
        other => {
            return Err(Error::new(
                NOT_SUPPT_OPT,
                format!("durable = {other}: use TVM_DURABLE_NONE, TVM_DURABLE_ALWAYS or TVM_DURABLE_INTERVAL"),
            ));
        }
    };
    if o.leases {
        spec.leases = Some(LeaseSpec {
            lease_ms: o.lease_ms,
            max_deliveries: o.max_deliveries,
            dead_letter: o.has_dead_letter.then_some(o.dead_letter),
            max_leases: o.max_leases,
        });
    }
    // SAFETY: the struct's contract: NULL or NUL-terminated strings.
    (spec.name, spec.part) = unsafe { (text(o.name), text(o.part)) };
    Ok(spec)
}

/// Creates queue t as `*opt` says: any kind of queue `tvmq create` makes
/// (durable, with leases, with a wait strategy, mode, unblock timeout,
/// name, partition, field list), with the same checks (the library's, which
/// `tvmq create` uses too). The file is created atomically in $TVMDBD.
/// opt->size must be set (lInitQueueOptions sets it): the library reads
/// that many bytes; members of a later tvm.h that this library does not
/// know must be zero (NOT_SUPPT_OPT otherwise). Thread-safe (one handle per
/// thread); `def` runs on the calling thread.
/// Errors: CONDIT_IS_NIL (NULL handle or opt, size too small, rows 0,
/// record_size 0 without def, values out of range: mode, spin, interval,
/// lease time, max leases, max deliveries), NOT_SUPPT_OPT (an unknown
/// durable value or later member; a queue as its own dead-letter queue), TBL_ARD_EXIST, MQUE_CRTE_BIG (too big),
/// NOT_DURABLE (a durable queue in a directory on tmpfs: set $TVMDBD to a
/// disk), SHM_ERR_ACCES, and those of lTableQueue's `def` (TABLE_NOT_DEF,
/// FTYPE_NOT_DEF, FLD_DEF_SPILL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lCreateQueueEx(p: *mut SATvm, t: TABLE, opt: *const TvmQueueOptions) -> c_long {
    let body = |_: &mut SATvm| {
        // SAFETY: the caller's contract: NULL or `size` readable bytes.
        let o = unsafe { options(opt) }?;
        let mut spec = spec_of(o)?;
        if let Some(def) = o.def {
            let (name, part, size, fields) = define_with(t, def)?;
            if spec.record_size == 0 {
                spec.record_size = size;
            }
            if o.name.is_null() {
                spec.name = name;
            }
            if o.part.is_null() {
                spec.part = part;
            }
            spec.fields = fields;
        }
        Queue::create(&queue_dir(), t, &spec)?;
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}

/// As lCreateQueueEx, on the Redis or Redis Cluster handle p is connected
/// to: stores the lease options of `*opt` (lease_ms, max_deliveries,
/// dead_letter, max_leases) in the hash `{t}:opts` (docs/client.md, "Leases
/// on Redis"), where every program's lTvmPopLease on queue t finds them. The
/// other members do not apply to a Redis list (it needs no creation, has
/// no capacity and holds values of any size) and are ignored; without
/// opt->leases nothing is stored. m_lEffect = 0.
/// Against tvmq serve: RMT_NOT_SUPPT (create the queue on the server's
/// machine: tvmq create, or lCreateQueueEx there).
/// Threads: one handle per thread, as lTvmPush.
/// Errors: CONDIT_IS_NIL (NULL handle or opt, size too small, lease
/// settings out of range as lCreateQueueEx checks them), NOT_SUPPT_OPT (a
/// later member set; a queue as its own dead-letter queue), TBL_ARD_EXIST
/// (`{t}:opts` exists: queue t has lease options already; lTvmDropTable
/// removes them), RMT_NOT_SUPPT, SERV_NOT_CONN, and the SOCK_* codes of
/// lTvmPush; with lTvmRequireReplicas, REPL_TIMEOUT.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lTvmCreateQueueEx(p: *mut SATvm, t: TABLE, opt: *const TvmQueueOptions) -> c_long {
    let body = |h: &mut SATvm| {
        // SAFETY: the caller's contract: NULL or `size` readable bytes.
        let o = unsafe { options(opt) }?;
        let spec = spec_of(o)?;
        if let Some(l) = &spec.leases {
            l.check(t)?;
        }
        client(h)?.create_options(t, spec.leases.as_ref())?;
        Ok(0)
    };
    // SAFETY: C callers pass NULL or a handle made by pGetSATvm/pCloneSATvm.
    unsafe { call(p, body) }
}
