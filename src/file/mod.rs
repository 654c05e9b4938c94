//! Queue files, by concern: [`layout`] (the bytes of a file and the checks
//! of its header), [`dir`] (where files live and who may open them),
//! [`create`] (atomic creation of a queue, removal, cleanup), [`map`]
//! (validated opening and mapping), [`live`] (the tmpfs file that holds an
//! `interval` queue's live part) and [`orphans`] (live parts whose queue
//! files were removed otherwise than by a drop, found and removed); below
//! them `make` (a file made atomically, for queue files and live parts
//! alike; an unlink that spares a file made under the same name meanwhile)
//! and `fs` (errors of file system calls, C paths, the kind of filesystem).

pub(crate) mod create;
pub(crate) mod dir;
mod fs;
pub(crate) mod layout;
pub(crate) mod live;
mod make;
pub(crate) mod map;
pub(crate) mod orphans;

pub use dir::{check_queue_dir, filesystem_size, queue_dir, queue_file_id, queue_ids, queue_path};
pub use layout::slot_stride;
pub use map::{queue_name, queue_name_and_part};
pub use orphans::OrphansRemoved;

#[cfg(test)]
mod tests;
