//! Queue files, by concern: [`layout`] (the bytes of a file and the checks
//! of its header), [`dir`] (where files live and who may open them),
//! [`create`] (atomic creation of a queue, removal, cleanup), [`map`]
//! (validated opening and mapping) and [`live`] (the tmpfs file that holds
//! an `interval` queue's live part); below them `make` (a file made
//! atomically, for queue files and live parts alike; an unlink that spares
//! a file made under the same name meanwhile) and `fs` (errors of file
//! system calls, C paths, the kind of filesystem).

pub(crate) mod create;
pub(crate) mod dir;
mod fs;
pub(crate) mod layout;
pub(crate) mod live;
mod make;
pub(crate) mod map;

pub use dir::{check_queue_dir, filesystem_size, queue_dir, queue_file_id, queue_ids, queue_path};
pub use layout::slot_stride;
pub use map::{queue_name, queue_name_and_part};

#[cfg(test)]
mod tests;
