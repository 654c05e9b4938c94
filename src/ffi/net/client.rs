//! The client behind a handle's m_pPriv, for the network calls.

use crate::client::Client;
use crate::error::*;
use crate::ffi::handle::state_mut;
use crate::ffi::{SATvm, TABLE};

/// The handle's client, or SERV_NOT_CONN.
pub(crate) fn client(h: &mut SATvm) -> Result<&mut Client> {
    if h.m_pPriv.is_null() {
        return Err(Error::new(SERV_NOT_CONN, "call lTvmConnect first"));
    }
    state_mut(h).net.as_mut().ok_or_else(|| Error::new(SERV_NOT_CONN, "call lTvmConnect first"))
}

/// For a pop: the handle's client, queue and record size; SERV_NOT_CONN, or
/// RECD_TOO_LONG for lSize 0 (no record fits).
pub(crate) fn popping(h: &mut SATvm) -> Result<(&mut Client, TABLE, usize)> {
    let (t, each) = (h.tblName, h.lSize);
    let c = client(h)?;
    if each == 0 {
        return Err(Error::new(RECD_TOO_LONG, "lSize 0"));
    }
    Ok((c, t, each))
}
