//! The live part of an `interval` queue (or an `always` queue with an
//! image, without leases): its control block, process table
//! and slots, kept in a tmpfs file beside the plain queues of the queue
//! file's owner (`/dev/shm/tvmq-<uid>`), while the queue file on the disk
//! holds its header and its image (what a restart after a machine crash
//! needs: see `crate::durable::image`).
//!
//! Why: a shared mapping of a file on a disk has its dirty pages written
//! back by the kernel on its own schedule (30 s after they were dirtied,
//! then every few seconds), and each pass cleans every page (a TLB
//! shootdown each) and makes the next store to it fault again; a fill that
//! such a pass fell on ran several times slower (docs/measurements.md).
//! tmpfs pages are never
//! written back. The live pages were never read after a machine crash
//! anyway: recovery rebuilds from the image.
//!
//! The live file has the layout of the queue file up to its image (the same
//! offsets: header page, control block, process table, slots), so the ring,
//! the registry and the image's writes work on its mapping unchanged. Its
//! name comes from the queue file alone, so that every process (the library,
//! the C calls, the `tvmq` commands, the server) finds the same one: the
//! device and inode of the queue file, the queue's id and its creation time
//! (`.interval-<dev>-<inode>-<id>-<created_ns>.live`). A copy of the queue
//! file (another inode) finds none and is rebuilt from its image, as after a
//! restart. Before it is trusted, its header page must hold the queue file's
//! header and options and, at [`LIVE_ID_OFFSET`], that identity; a file of
//! that name that does not is replaced (rebuilt from the image).
//!
//! When it is missing (after a reboot tmpfs is empty; or it was removed),
//! the process that attaches for writing makes a new one, all zero but its
//! header: its boot id is then unset, so the recovery of any durable queue
//! runs (`crate::durable::recover`) and rebuilds the ring from the image.
//! A killed process leaves it as it was: the next attach uses it.

use super::dir::default_dir_of;
use super::fs::io_error;
use super::layout::{HEADER_BYTES, Header, OPTIONS_OFFSET, Options, fnv1a, header_page, image_offset};
use super::make::{Contents, create_temporary, fill, publish_new, unlink_if_same};
use super::orphans::{LIVE_TEMPORARY, hold, live_name, record_queue, remove_orphans};
use crate::error::*;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Offset, in the live file's header page, of its [`LiveId`] (after the
/// queue file's header and options, which the page repeats).
pub(crate) const LIVE_ID_OFFSET: u64 = HEADER_BYTES - 64;
const _: () = assert!(OPTIONS_OFFSET as u64 + size_of::<Options>() as u64 <= LIVE_ID_OFFSET);

/// First bytes of a [`LiveId`].
const LIVE_MAGIC: [u8; 8] = *b"TVMQLIVE";

/// Whose live file it is: the queue file it belongs to.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LiveId {
    magic: [u8; 8],
    /// `st_dev` and `st_ino` of the queue file.
    dev: u64,
    ino: u64,
    id: u64,
    created_ns: u64,
    reserved: [u64; 2],
    /// FNV-1a 64 of the words above.
    check: u64,
}
const _: () = assert!(size_of::<LiveId>() == 64);

impl LiveId {
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: LiveId is repr(C) integers and bytes without padding (64 bytes, asserted).
        unsafe { std::slice::from_raw_parts((self as *const LiveId).cast::<u8>(), size_of::<LiveId>()) }
    }
}

/// The queue file's identity, from which its live file is found.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    dev: u64,
    ino: u64,
    id: u32,
    created_ns: u64,
    /// The queue file's owner: the live file lives in its directory.
    uid: u32,
    /// The queue file's permission bits, given to the live file.
    mode: u32,
    /// Where the queue file is (absolute), recorded with the live file (see
    /// `super::orphans`).
    queue: PathBuf,
}

impl Identity {
    /// The identity of the queue file `disk` (open at `path`, to be named
    /// `queue`), whose header is `info`.
    pub(crate) fn of(disk: &File, info: &Header, path: &Path, queue: &Path) -> Result<Identity> {
        let m = disk.metadata().map_err(|e| io_error(SHM_ERR_INVAL, "cannot stat", path, e))?;
        Ok(Identity {
            dev: m.dev(),
            ino: m.ino(),
            id: info.id,
            created_ns: info.created_ns,
            uid: m.uid(),
            mode: m.mode() & 0o777,
            queue: std::path::absolute(queue).unwrap_or_else(|_| queue.to_path_buf()),
        })
    }

    /// Does `path` still name the queue file (not dropped or replaced)?
    pub(crate) fn still_at(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == (self.dev, self.ino))
    }

    fn live_id(&self) -> LiveId {
        let mut l = LiveId {
            magic: LIVE_MAGIC,
            dev: self.dev,
            ino: self.ino,
            id: u64::from(self.id),
            created_ns: self.created_ns,
            reserved: [0; 2],
            check: 0,
        };
        l.check = fnv1a(&l.as_bytes()[..56]);
        l
    }

    /// Where the live file of this queue file is.
    pub(crate) fn path(&self) -> PathBuf {
        default_dir_of(self.uid).join(live_name(self.dev, self.ino, self.id, self.created_ns))
    }
}

/// Bytes of the live file of a queue with header `info`: everything before
/// its image.
pub(crate) fn live_len(info: &Header) -> Option<u64> {
    image_offset(info.capacity, info.record_size, 0)
}

/// Does a queue with these options keep its live part in tmpfs? An
/// `interval` or `always` queue without leases (any queue with an image
/// and no lease table). One with leases persists its lease
/// table in place, in the queue file (a sync writes the table's pages
/// there after the image: see `durable`), so its live part stays in the
/// queue file, whose pages the kernel may write back.
pub(crate) fn in_tmpfs(options: &Options) -> bool {
    options.image() && options.lease_entries() == 0
}

/// The header page a live file must hold: the queue file's header and
/// options, and the identity.
fn live_header_page(info: &Header, options: &Options, ident: &Identity) -> Vec<u8> {
    let mut page = header_page(info, options);
    let at = LIVE_ID_OFFSET as usize;
    page[at..at + size_of::<LiveId>()].copy_from_slice(ident.live_id().as_bytes());
    page
}

/// An open live file.
pub(crate) struct Live {
    pub(crate) file: File,
    pub(crate) path: PathBuf,
    /// Made by this open (all zero: the ring is to be rebuilt from the image).
    pub(crate) made: bool,
}

impl Live {
    /// Unlinks the live file, unless its name now leads to another file.
    pub(crate) fn remove(&self) {
        let _ = unlink_if_same(&self.path, &self.file);
    }
}

/// What is at a live file's name.
enum Found {
    Ours(File),
    Missing,
    /// A regular file of the owner that is not this queue's live file (a
    /// creation cut short, a leftover of another file on the same inode).
    NotOurs,
}

/// Opens the live file at `path` if it is ours: a regular file of the
/// queue file's owner (or ours), of the right size, with the header page
/// `want`. A link, a file of another type or owner is refused.
fn open_existing(path: &Path, want: &[u8], len: u64, ident: &Identity, write: bool) -> Result<Found> {
    let Some(file) = super::dir::open_nofollow(path, write)? else { return Ok(Found::Missing) };
    let meta = file.metadata().map_err(|e| io_error(SHM_ERR_INVAL, "cannot stat", path, e))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !meta.file_type().is_file() || (meta.uid() != ident.uid && meta.uid() != me) {
        return Err(Error::new(
            SHM_ERR_ACCES,
            format!("{} is not a regular file of uid {}: refused", path.display(), ident.uid),
        ));
    }
    let mut page = vec![0u8; want.len()];
    if meta.len() != len || file.read_exact_at(&mut page, 0).is_err() || page != want {
        return Ok(Found::NotOurs);
    }
    Ok(Found::Ours(file))
}

/// The live file of the queue file `ident`, if there is one (never made):
/// for inspection and for dropping.
pub(crate) fn find(info: &Header, options: &Options, ident: &Identity, write: bool) -> Result<Option<Live>> {
    let len = live_len(info).ok_or_else(too_large)?;
    let path = ident.path();
    match open_existing(&path, &live_header_page(info, options, ident), len, ident, write)? {
        Found::Ours(file) => Ok(Some(Live { file, path, made: false })),
        Found::Missing | Found::NotOurs => Ok(None),
    }
}

/// The live file of the queue file `ident`, made (all zero but its header,
/// to be rebuilt from the image) if it is missing or not ours.
/// Then sweeps the user's orphaned live parts (see `super::orphans`): after
/// its own is held and records where its queue file is now, so that a
/// queue moved with its directory keeps its live part.
pub(crate) fn attach(info: &Header, options: &Options, ident: &Identity) -> Result<Live> {
    let live = attach_held(info, options, ident)?;
    remove_orphans();
    Ok(live)
}

/// [`attach`] but its sweep.
fn attach_held(info: &Header, options: &Options, ident: &Identity) -> Result<Live> {
    let len = live_len(info).ok_or_else(too_large)?;
    let path = ident.path();
    let want = live_header_page(info, options, ident);
    // A few rounds: another process may make or replace it meanwhile.
    for _ in 0..4 {
        match open_existing(&path, &want, len, ident, true)? {
            Found::Ours(file) => {
                #[cfg(test)]
                if let Some(f) = BEFORE_HOLD.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    f();
                }
                // Held before it is trusted: a sweep of orphans may have
                // removed it since it was opened (then look again).
                if !hold(&file, &path).map_err(|e| io_error(SHM_ERR_ACCES, "cannot lock", &path, e))? {
                    continue;
                }
                // The queue file may have moved since (with its directory).
                record_queue(&file, &ident.queue);
                return Ok(Live { file, path, made: false });
            }
            Found::Missing => {}
            Found::NotOurs => {
                let _ = std::fs::remove_file(&path);
            }
        }
        if crate::clock::boot_id().is_none() {
            // Without it, recovery could not tell that the new file must be rebuilt.
            return Err(Error::new(
                SHM_ERR_INVAL,
                "cannot read /proc/sys/kernel/random/boot_id, which rebuilding an interval queue's live part needs",
            ));
        }
        if let Some(live) = make(info, &want, len, ident, false)? {
            return Ok(live);
        }
    }
    Err(Error::new(SHM_ERR_ACCES, format!("cannot make {}: others keep replacing it", path.display())))
}

/// (Tests.) Run once by the next [`attach`] that finds a live file, between
/// its open and its hold: where another process's sweep may come.
#[cfg(test)]
pub(crate) static BEFORE_HOLD: std::sync::Mutex<Option<fn()>> = std::sync::Mutex::new(None);

/// (Creation of an `interval` queue.) Makes its live file, stamped with this
/// boot's id (its first attach needs no recovery). Fails if it exists.
pub(crate) fn create(info: &Header, options: &Options, ident: &Identity) -> Result<Live> {
    let len = live_len(info).ok_or_else(too_large)?;
    remove_orphans();
    let want = live_header_page(info, options, ident);
    make(info, &want, len, ident, true)?
        .ok_or_else(|| Error::new(TBL_ARD_EXIST, format!("the live part {} exists already", ident.path().display())))
}

fn too_large() -> Error {
    Error::new(MQUE_CRTE_BIG, "the queue's geometry overflows its live part")
}

/// The directory of live files of `ident`'s owner: checked (and made, 0700,
/// by its owner) as the default queue directory is.
fn live_dir(ident: &Identity) -> Result<PathBuf> {
    let dir = default_dir_of(ident.uid);
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if ident.uid == me {
        super::dir::check_dir(&dir, true)?;
        return Ok(dir);
    }
    // Another user's queue: its owner's directory, which must exist and be theirs.
    match std::fs::symlink_metadata(&dir) {
        Ok(m) if m.file_type().is_dir() && m.uid() == ident.uid => Ok(dir),
        Ok(_) => Err(Error::new(
            SHM_ERR_ACCES,
            format!("{} is not a directory of uid {}: refused", dir.display(), ident.uid),
        )),
        Err(e) => Err(io_error(
            SHM_ERR_ACCES,
            &format!("the live part of an interval queue of uid {} is kept in", ident.uid),
            &dir,
            e,
        )),
    }
}

/// Makes the live file: a temporary file filled and published under its
/// name, which must not exist (`Ok(None)` if another process published one
/// first). `stamp`: write this boot's id into its control block.
fn make(info: &Header, want: &[u8], len: u64, ident: &Identity, stamp: bool) -> Result<Option<Live>> {
    let dir = live_dir(ident)?;
    let path = ident.path();
    let (tmp, file) = create_temporary(&dir, LIVE_TEMPORARY, ident.mode)?;
    // Recorded before it is published: no live file is found without it.
    record_queue(&file, &ident.queue);
    // As for a plain queue in /dev/shm: every page reserved now and
    // cleared once, but the process table's intent pages, left a hole.
    let ranges: Vec<(u64, u64)> =
        info.allocated_ranges().into_iter().map(|(from, to)| (from, to.min(len))).filter(|(a, b)| a < b).collect();
    let contents =
        Contents { mode: ident.mode, len, ranges: &ranges, header: want, durable: false, stamp_boot_id: stamp };
    let r = fill(&file, &tmp, &contents)
        .and_then(|()| publish_new(&tmp, &path).map_err(|e| io_error(SHM_ERR_ACCES, "cannot create", &path, e)));
    match r {
        Ok(true) => Ok(Some(Live { file, path, made: true })),
        Ok(false) => {
            let _ = std::fs::remove_file(&tmp);
            Ok(None)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::fs::cpath;
    use crate::file::queue_path;
    use crate::queue::{Queue, Wait};
    use crate::spec::{Durability, Spec};
    use crate::test_support::DiskDir;
    use std::os::unix::fs::MetadataExt;

    fn on_tmpfs(path: &Path) -> bool {
        let c = cpath(path).unwrap();
        // SAFETY: statfs is plain data; all-zero is a valid value for the call to fill.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid C path and out pointer.
        assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0, "statfs {}", path.display());
        st.f_type == libc::TMPFS_MAGIC
    }

    fn interval_queue(dir: &Path, id: u32, rows: u64, size: u64) {
        let mut spec = Spec::new(rows, size);
        // An hour: only the test's syncs run.
        spec.durability = Some(Durability::Interval(3_600_000));
        Queue::create(dir, id, &spec).unwrap();
    }

    /// The live files in this user's directory whose names hold queue `id`.
    fn live_files_of(id: u32) -> Vec<String> {
        // SAFETY: geteuid has no preconditions.
        let dir = default_dir_of(unsafe { libc::geteuid() });
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".interval-") && n.contains(&format!("-{id}-")))
            .collect()
    }

    /// The live parts of durable queues whose directory was removed with
    /// `rm -rf` (not `tvmq drop`): found and removed at the next create of
    /// a queue with a live part, elsewhere, which gives their memory back
    /// (the tmpfs files unlinked, mapped by nobody); one a process still
    /// has attached is kept until it detaches, then removed by the sweep
    /// `tvmq repair` runs. (Before, they stayed until a reboot.)
    #[test]
    fn live_parts_of_a_removed_directory_are_removed_and_their_memory_given_back() {
        const IDS: [u32; 3] = [4_000_000_021, 4_000_000_022, 4_000_000_023];
        let dir = DiskDir::new("live-orphans");
        for id in IDS {
            interval_queue(&dir.0, id, 2000, 304);
        }
        let parts: Vec<(PathBuf, u64)> = IDS
            .iter()
            .map(|&id| {
                let q = Queue::open(&dir.0, id).unwrap();
                q.push(&[7u8; 304]).unwrap();
                let live = q.live_path().unwrap().to_path_buf();
                let bytes = std::fs::metadata(&live).unwrap().blocks() * 512;
                (live, bytes)
            })
            .collect();
        assert!(parts.iter().all(|(_, bytes)| *bytes > 600_000), "{parts:?}");
        // The third stays attached.
        let attached = Queue::open(&dir.0, IDS[2]).unwrap();
        std::fs::remove_dir_all(&dir.0).unwrap();
        // (Other processes' creates and attaches may remove them from here
        // on too: the test asserts that they are gone, not who removed them.)
        let elsewhere = DiskDir::new("live-orphans-next");
        interval_queue(&elsewhere.0, 1, 8, 16);
        assert!(!parts[0].0.exists() && !parts[1].0.exists(), "removed at the next create");
        assert!(parts[2].0.exists(), "attached: kept");
        drop(attached);
        Queue::remove_orphaned_live_parts();
        assert!(!parts[2].0.exists(), "removed once detached");
        Queue::drop_queue(&elsewhere.0, 1).unwrap();
    }

    /// A queue moved with its directory keeps its live part at its next
    /// attach (which sweeps after it holds its own and records the new
    /// place): the same file, not rebuilt.
    #[test]
    fn a_queue_moved_with_its_directory_keeps_its_live_part() {
        let disk = DiskDir::new("live-moved");
        let (a, b) = (disk.0.join("a"), disk.0.join("b"));
        std::fs::create_dir(&a).unwrap();
        interval_queue(&a, 1, 16, 16);
        let q = Queue::open(&a, 1).unwrap();
        let live = q.live_path().unwrap().to_path_buf();
        let ino = std::fs::metadata(&live).unwrap().ino();
        // Kept attached across the move: another test's process that
        // sweeps between the rename and the attach below would otherwise
        // take the part for an orphan (its recorded place is gone).
        let keep = q;
        std::fs::rename(&a, &b).unwrap();
        let q = Queue::open(&b, 1).unwrap();
        assert_eq!(q.live_path(), Some(live.as_path()));
        assert_eq!(std::fs::metadata(&live).unwrap().ino(), ino, "the same live part");
        drop((keep, q));
        Queue::drop_queue(&b, 1).unwrap();
    }

    /// A sweep that comes between an attach's open of the live file and
    /// its hold (another process's, when the queue's directory was moved
    /// and the live part records the old place) removes the file: the
    /// attach finds it gone and makes a new one, which the next attach
    /// uses too (an attach that kept the removed file pushed where the
    /// next one, on a new file, never popped).
    #[test]
    fn an_attach_overtaken_by_a_sweep_never_keeps_the_removed_live_part() {
        let disk = DiskDir::new("live-overtaken");
        let (a, b) = (disk.0.join("a"), disk.0.join("b"));
        std::fs::create_dir(&a).unwrap();
        interval_queue(&a, 1, 16, 16);
        drop(Queue::open(&a, 1).unwrap());
        std::fs::rename(&a, &b).unwrap();
        *BEFORE_HOLD.lock().unwrap() = Some(|| {
            // Removes the orphan (unless another test's process swept it
            // before this attach opened it: then nothing is left to race).
            crate::file::orphans::remove_orphans();
        });
        let pusher = Queue::open(&b, 1).unwrap();
        assert!(BEFORE_HOLD.lock().unwrap().is_none(), "the sweep ran");
        let popper = Queue::open(&b, 1).unwrap();
        pusher.push(b"once").unwrap();
        let mut out = [0u8; 16];
        assert_eq!(popper.pop(&mut out, Wait::NoWait).unwrap(), 4, "both attachments use one live part");
        assert_eq!(&out[..4], b"once");
        drop((pusher, popper));
        Queue::drop_queue(&b, 1).unwrap();
    }

    /// A detached view of an `interval` queue maps its live part, holds no
    /// descriptor, and sees the processes attached through the locks of the
    /// live part (where they are taken), opened again for the look.
    #[test]
    fn a_detached_view_of_an_interval_queue_reads_its_live_part() {
        let dir = DiskDir::new("live-detached");
        interval_queue(&dir.0, 1, 64, 16);
        let q = Queue::open(&dir.0, 1).unwrap();
        q.push(&[1u8; 16]).unwrap();
        let f = crate::file::map::QueueFile::open(&dir.0, 1, crate::file::map::Access::Detached).unwrap();
        assert_eq!(f.descriptors(), 0);
        assert!(!f.is_volatile(), "the queue file is on the disk");
        drop(f);
        let view = Queue::inspect_detached(&dir.0, 1).unwrap();
        let s = view.snapshot();
        assert_eq!((s.depth, s.processes), (1, 1));
        q.push(&[2u8; 16]).unwrap();
        assert_eq!(view.depth(), 2, "the live part is what is mapped");
        drop(q);
        assert_eq!(view.snapshot().processes, 0);
        drop(view);
        Queue::drop_queue(&dir.0, 1).unwrap();
    }

    /// An `interval` queue's pushes, pops and syncs never write the live
    /// part of its file on the disk: its mapping is a tmpfs file, the
    /// disk file's live range stays a hole of zeros (only its header page
    /// and its image are allocated), and a sync writes the image only.
    #[test]
    fn an_interval_queues_live_part_is_in_tmpfs_and_its_disk_file_gets_no_live_writes() {
        let dir = DiskDir::new("live-tmpfs");
        interval_queue(&dir.0, 1, 256, 304);
        let disk = queue_path(&dir.0, 1);
        let q = Queue::open(&dir.0, 1).unwrap();
        let live = q.live_path().expect("a live part").to_path_buf();
        assert!(on_tmpfs(&live), "{}", live.display());
        assert!(!on_tmpfs(&disk));
        // `tvmq list` of the directory that holds it does not see a queue.
        assert_eq!(crate::file::queue_file_id(live.file_name().unwrap()), None);
        for i in 0..200u32 {
            q.push(&[i as u8; 304]).unwrap();
        }
        let mut out = [0u8; 304];
        for _ in 0..10 {
            q.pop(&mut out, Wait::NoWait).unwrap();
        }
        q.sync().unwrap();
        let info = crate::file::map::read_header(&dir.0, 1).unwrap();
        let image = live_len(&info).unwrap();
        let f = File::open(&disk).unwrap();
        let mut live_range = vec![0u8; (image - HEADER_BYTES) as usize];
        f.read_exact_at(&mut live_range, HEADER_BYTES).unwrap();
        assert!(live_range.iter().all(|&b| b == 0), "the disk file's live range was written");
        // The image got the records (the slots lie there as from DATA_OFFSET).
        let stride = crate::file::layout::stride_for(304, true);
        let mut slot = vec![0u8; 304];
        f.read_exact_at(&mut slot, image + 4096 + 199 * stride + 16).unwrap();
        assert_eq!(slot, vec![199u8; 304], "the sync wrote the image");
        // Allocated on the disk: the header page and the image, not the
        // live range (a hole).
        let allocated = f.metadata().unwrap().blocks() * 512;
        let wanted = HEADER_BYTES + (info.file_size - image);
        assert!(allocated <= wanted + 4096, "{allocated} bytes allocated, header and image are {wanted}");
        assert!(info.file_size - wanted > 1 << 20, "a live range worth the check");
        drop(q);
        Queue::drop_queue(&dir.0, 1).unwrap();
        assert!(!live.exists() && !disk.exists(), "drop removes both files");
    }

    /// An `interval` queue with leases keeps its live part in its queue
    /// file (its syncs persist the lease table in place there): no live
    /// file in tmpfs, and its records are in the disk file's mapping.
    #[test]
    fn an_interval_queue_with_leases_keeps_its_live_part_in_its_queue_file() {
        const ID: u32 = 4_000_000_011;
        let dir = DiskDir::new("live-leases");
        let mut spec = Spec::new(64, 16);
        spec.durability = Some(Durability::Interval(3_600_000));
        spec.leases = Some(crate::spec::LeaseSpec { max_leases: 8, ..Default::default() });
        Queue::create(&dir.0, ID, &spec).unwrap();
        let q = Queue::open(&dir.0, ID).unwrap();
        assert_eq!(q.live_path(), None);
        assert!(live_files_of(ID).is_empty(), "{:?}", live_files_of(ID));
        q.push(&[5u8; 16]).unwrap();
        let mut out = [0u8; 16];
        let (_, lease) = q.pop_lease(&mut out, Wait::NoWait, std::time::Duration::ZERO).unwrap();
        q.ack(&lease).unwrap();
        drop(q);
        Queue::drop_queue(&dir.0, ID).unwrap();
        assert!(!queue_path(&dir.0, ID).exists());
    }

    /// After a reboot tmpfs is empty: an `interval` queue whose live part
    /// is missing is rebuilt from its image (what its last sync wrote:
    /// records popped since are delivered again, those pushed since are
    /// lost, as after a machine crash within the interval), and processes
    /// that attach while its live part exists share it, without recovery.
    #[test]
    fn an_interval_queue_without_its_live_part_is_rebuilt_from_its_image() {
        let dir = DiskDir::new("live-reboot");
        interval_queue(&dir.0, 1, 64, 16);
        let q = Queue::open(&dir.0, 1).unwrap();
        // Another attach shares the live part as it is (attached before the
        // changes: an attach syncs what it finds unsynced; and handles are
        // dropped at the end only: a drop syncs).
        let again = Queue::open(&dir.0, 1).unwrap();
        let rec = |i: u32| [i.to_le_bytes(), [7; 4], [8; 4], [9; 4]].concat();
        let mut out = [0u8; 16];
        for i in 1..=20 {
            q.push(&rec(i)).unwrap();
        }
        for _ in 0..5 {
            q.pop(&mut out, Wait::NoWait).unwrap();
        }
        q.sync().unwrap(); // the image: 6..=20 queued
        for i in 21..=30 {
            q.push(&rec(i)).unwrap();
        }
        for _ in 0..3 {
            q.pop(&mut out, Wait::NoWait).unwrap(); // 6..=8, not synced
        }
        let live = q.live_path().unwrap().to_path_buf();
        assert_eq!(again.live_path(), Some(&*live));
        assert_eq!(again.depth(), 22);
        assert!(again.durable_stats().unwrap().last_recovery.is_none(), "no recovery");
        // The reboot: the tmpfs file is gone (the attached handle keeps an
        // unlinked mapping, as a process of the previous boot would).
        std::fs::remove_file(&live).unwrap();
        let r = Queue::open(&dir.0, 1).unwrap();
        assert_eq!(r.live_path(), Some(&*live), "made again under the same name");
        let found = r.durable_stats().unwrap().last_recovery.expect("a recovery ran");
        assert_eq!((found.kept, found.watermark), (15, 5), "{found:?}");
        let mut got = Vec::new();
        while let Ok(n) = r.pop(&mut out, Wait::NoWait) {
            assert_eq!(n, 16);
            got.push(u32::from_le_bytes(out[..4].try_into().unwrap()));
        }
        assert_eq!(got, (6..=20).collect::<Vec<u32>>(), "what the last sync wrote");
        drop(r); // synced: the image holds an empty ring
        // A file of that name that is not this queue's live part (here: a
        // live part of the right size whose header was damaged) is replaced
        // and rebuilt from the image too.
        let f = std::fs::OpenOptions::new().write(true).open(&live).unwrap();
        f.write_all_at(b"garbage!", LIVE_ID_OFFSET).unwrap();
        drop(f);
        let r = Queue::open(&dir.0, 1).unwrap();
        let found = r.durable_stats().unwrap().last_recovery.expect("a recovery ran");
        assert_eq!((found.runs, found.kept), (2, 0), "rebuilt again, counted: {found:?}");
        drop(r);
        // A link in its place is refused, never followed.
        std::fs::remove_file(&live).unwrap();
        std::os::unix::fs::symlink("/dev/null", &live).unwrap();
        assert_eq!(Queue::open(&dir.0, 1).unwrap_err().code(), SHM_ERR_ACCES);
        std::fs::remove_file(&live).unwrap();
        drop((q, again));
    }

    /// Creations racing for one `interval` queue leave one queue file and
    /// one live part: the losers remove the live parts they made.
    #[test]
    fn racing_creations_of_an_interval_queue_leave_one_live_part() {
        const ID: u32 = 4_000_000_007;
        let dir = DiskDir::new("live-race");
        let before = live_files_of(ID);
        let new = || live_files_of(ID).into_iter().filter(|n| !before.contains(n)).collect::<Vec<_>>();
        let wins: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..6)
                .map(|_| {
                    let d = dir.0.clone();
                    s.spawn(move || {
                        let mut spec = Spec::new(64, 16);
                        spec.durability = Some(Durability::Interval(1000));
                        usize::from(Queue::create(&d, ID, &spec).is_ok())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(wins, 1);
        let disk = std::fs::metadata(queue_path(&dir.0, ID)).unwrap();
        let names = new();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].starts_with(&format!(".interval-{:x}-{}-", disk.dev(), disk.ino())), "{names:?}");
        Queue::drop_queue(&dir.0, ID).unwrap();
        assert_eq!(new(), Vec::<String>::new());
    }
}
