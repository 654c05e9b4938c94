//! RESP codec (being written).
